/**
 * A call to a device's supervisor from whichever replica the user's request landed on. The
 * device's tunnel is on one replica: this one (called directly) or another (asked over the
 * replica bus; the owner calls the device and sends the answer back). Which replica holds a
 * tunnel comes from the database (ReplicaDirectory), so no replica keeps a map of the others.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { errorCatalogue, FleetlabError, type ErrorCode } from '../../errors.js';
import type { TunnelRequest } from '../../protocol/device-cloud.js';
import type { DeviceAnswer, TunnelHub } from '../device/tunnel-hub.js';
import type { ReplicaBus } from './postgres-bus.js';
import type { ReplicaDirectory } from './replica-directory.js';

export type DeviceRequest = Omit<TunnelRequest, 'type' | 'id'>;

export interface DeviceCalls {
  /** Those of the given devices connected to a live replica, in the given order. */
  reachable(uuids: readonly string[]): Promise<string[]>;
  /** One device API call. 404 when the device is not connected anywhere, 504 after `timeoutMs`. */
  call(uuid: string, request: DeviceRequest, timeoutMs: number): Promise<DeviceAnswer>;
}

const Ask = Type.Object({
  kind: Type.Literal('ask'),
  id: Type.Integer(),
  from: Type.String(),
  uuid: Type.String(),
  request: Type.Object({ method: Type.String(), path: Type.String(), body: Type.Optional(Type.Unknown()) }),
  timeoutMs: Type.Integer({ minimum: 1 }),
});
const Answer = Type.Object({
  kind: Type.Literal('answer'),
  id: Type.Integer(),
  answer: Type.Optional(Type.Object({ status: Type.Integer(), contentType: Type.Optional(Type.String()), body: Type.String() })),
  error: Type.Optional(Type.Object({ code: Type.String(), message: Type.String() })),
});
type Ask = Static<typeof Ask>;
type Answer = Static<typeof Answer>;

/** The owner needs a moment beyond the device's own timeout to send its 504 back. */
const FORWARD_MARGIN_MS = 2_000;

export interface ClusterCallsDeps {
  readonly hub: TunnelHub;
  readonly directory: ReplicaDirectory;
  /** Null when the database cannot carry messages (SQLite: one cloud process). */
  readonly bus: ReplicaBus | null;
  readonly log: { warn(message: string): void };
}

export class ClusterCalls implements DeviceCalls {
  private readonly pending = new Map<number, { resolve: (a: DeviceAnswer) => void; reject: (e: Error) => void }>();
  private nextId = 1;

  constructor(private readonly deps: ClusterCallsDeps) {
    deps.bus?.listen((message) => this.receive(message));
  }

  async reachable(uuids: readonly string[]): Promise<string[]> {
    const elsewhere = uuids.filter((u) => !this.deps.hub.isOnline(u));
    const owners = elsewhere.length > 0 ? await this.deps.directory.owners(elsewhere) : new Map<string, string>();
    return uuids.filter((u) => this.deps.hub.isOnline(u) || (owners.has(u) && owners.get(u) !== this.deps.directory.id));
  }

  async call(uuid: string, request: DeviceRequest, timeoutMs: number): Promise<DeviceAnswer> {
    if (this.deps.hub.isOnline(uuid)) return this.deps.hub.call(uuid, request, timeoutMs);
    const owner = (await this.deps.directory.owners([uuid])).get(uuid);
    if (!owner || owner === this.deps.directory.id) throw new FleetlabError('CLOUD_ERR_DEVICE_OFFLINE', `device ${uuid} is not connected`);
    const bus = this.deps.bus;
    if (!bus) {
      throw new FleetlabError('CLOUD_ERR_REPLICA', `device ${uuid} is connected to another cloud process (replica ${owner}); several cloud processes need PostgreSQL (--database postgres://…) to reach each other's devices`);
    }
    const id = this.nextId++;
    const answered = new Promise<DeviceAnswer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new FleetlabError('CLOUD_ERR_DEVICE_TIMEOUT', `device ${uuid} (on replica ${owner}) did not answer ${request.method} ${request.path} within ${timeoutMs} ms`));
      }, timeoutMs + FORWARD_MARGIN_MS);
      this.pending.set(id, {
        resolve: (a) => (clearTimeout(timer), resolve(a)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
    });
    const ask: Ask = { kind: 'ask', id, from: this.deps.directory.id, uuid, request, timeoutMs };
    bus.send(owner, ask).catch((err) => this.settle({ kind: 'answer', id, error: { code: 'CLOUD_ERR_REPLICA', message: `could not reach replica ${owner}: ${String(err)}` } }));
    return answered;
  }

  /** Fails the calls still waiting for another replica (this one is stopping). */
  close(): void {
    for (const p of this.pending.values()) p.reject(new FleetlabError('CLOUD_ERR_REPLICA', 'the cloud process is stopping'));
    this.pending.clear();
  }

  private receive(message: unknown): void {
    if (Value.Check(Ask, message)) void this.serve(message);
    else if (Value.Check(Answer, message)) this.settle(message);
    else this.deps.log.warn('replica bus: ignored a message of unknown shape');
  }

  /** Another replica's user called a device whose tunnel is here. */
  private async serve(ask: Ask): Promise<void> {
    let reply: Answer;
    try {
      const answer = await this.deps.hub.call(ask.uuid, ask.request as DeviceRequest, ask.timeoutMs);
      reply = { kind: 'answer', id: ask.id, answer };
    } catch (err) {
      const code = err instanceof FleetlabError ? err.code : 'CLOUD_ERR_INTERNAL';
      reply = { kind: 'answer', id: ask.id, error: { code, message: err instanceof Error ? err.message : String(err) } };
    }
    await this.deps.bus?.send(ask.from, reply).catch((err) => this.deps.log.warn(`replica bus: answer to ${ask.from} lost: ${String(err)}`));
  }

  private settle(message: Answer): void {
    const p = this.pending.get(message.id);
    if (!p) return;
    this.pending.delete(message.id);
    if (message.answer) return p.resolve(message.answer);
    const code = (message.error?.code ?? 'CLOUD_ERR_INTERNAL') as ErrorCode;
    p.reject(new FleetlabError(code in errorCatalogue ? code : 'CLOUD_ERR_INTERNAL', message.error?.message ?? 'the replica sent an empty answer'));
  }
}
