/**
 * The cloud's end of the device tunnels: one WebSocket per online device, opened by the
 * device (devices sit behind NAT; the cloud never dials them). The proxy route calls a device
 * through here. Being connected is what "online" means to the cloud.
 */
import { STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { Value } from '@sinclair/typebox/value';
import { FleetlabError } from '../../errors.js';
import { TunnelResponse, type TunnelRequest } from '../../protocol/device-cloud.js';
import { errorResponse } from '../api/errors.js';

export interface TunnelHubDeps {
  /** The device a tunnel request authenticates as, or null to refuse it (401). */
  authenticate(uuid: string, key: string): Promise<{ deviceId: number } | null>;
  /** Online/offline bookkeeping (device.is_online, which replica holds the tunnel). Not called while closing. */
  onChange(uuid: string, deviceId: number, online: boolean): Promise<void>;
  readonly heartbeatMs: number;
  readonly log: { warn(message: string): void };
}

export interface DeviceAnswer {
  readonly status: number;
  readonly contentType?: string;
  readonly body: string;
}

interface Connection {
  readonly deviceId: number;
  readonly socket: WebSocket;
  readonly pending: Map<number, { resolve: (answer: DeviceAnswer) => void; reject: (err: Error) => void }>;
  nextId: number;
}

const tunnelPath = /^\/device\/v3\/([0-9a-f]{32}|[0-9a-f]{62})\/tunnel$/;

/** A refused upgrade, answered on the raw socket in the same shape as every other cloud error. */
function refuse(socket: Duplex, err: FleetlabError): void {
  const r = errorResponse(err);
  const headers = Object.entries({ ...r.headers, connection: 'close', 'content-length': String(Buffer.byteLength(r.body)) }).map(([k, v]) => `${k}: ${v}\r\n`);
  socket.end(`HTTP/1.1 ${r.status} ${STATUS_CODES[r.status] ?? ''}\r\n${headers.join('')}\r\n${r.body}`);
}

export class TunnelHub {
  private readonly wss = new WebSocketServer({ noServer: true });
  private readonly connections = new Map<string, Connection>();
  private heartbeat: NodeJS.Timeout | undefined;
  private readonly alive = new WeakSet<WebSocket>();
  private closing = false;
  /**
   * Each device's online/offline writes, one after another in the order their events came.
   * Per connection was not enough: a device whose first connection closed while its online
   * write waited for the database (a busy pool) and that reconnected at once had its new
   * connection's online write land before the old one's offline write, which then deleted
   * the new tunnel's row and left the device offline for good (11 of 2,000 devices after a
   * replica was killed, bench/fleet.bench.ts on PostgreSQL).
   */
  private readonly bookkeeping = new Map<string, Promise<void>>();

  constructor(private readonly deps: TunnelHubDeps) {}

  private record(uuid: string, deviceId: number, online: boolean): void {
    const write = (this.bookkeeping.get(uuid) ?? Promise.resolve())
      .then(() => this.deps.onChange(uuid, deviceId, online))
      .catch((err) => this.deps.log.warn(`device ${uuid} ${online ? 'online' : 'offline'} bookkeeping: ${String(err)}`));
    this.bookkeeping.set(uuid, write);
    void write.then(() => this.bookkeeping.get(uuid) === write && this.bookkeeping.delete(uuid));
  }

  /** Takes over WebSocket upgrades on the tunnel path of `server`. */
  attach(server: Server): void {
    server.on('upgrade', (req, socket, head) => void this.upgrade(req, socket, head));
    this.heartbeat = setInterval(() => {
      for (const { socket } of this.connections.values()) {
        if (!this.alive.has(socket)) socket.terminate();
        else {
          this.alive.delete(socket);
          socket.ping();
        }
      }
    }, this.deps.heartbeatMs);
    this.heartbeat.unref();
  }

  isOnline(uuid: string): boolean {
    return this.connections.has(uuid);
  }

  /** The tunnels held now. */
  held(): Array<{ uuid: string; deviceId: number }> {
    return [...this.connections].map(([uuid, c]) => ({ uuid, deviceId: c.deviceId }));
  }

  /** One device API call through the device's tunnel. 404 when offline, 504 after `timeoutMs`. */
  call(uuid: string, request: Omit<TunnelRequest, 'type' | 'id'>, timeoutMs: number): Promise<DeviceAnswer> {
    const conn = this.connections.get(uuid);
    if (!conn) return Promise.reject(new FleetlabError('CLOUD_ERR_DEVICE_OFFLINE', `device ${uuid} is not connected`));
    const id = conn.nextId++;
    return new Promise<DeviceAnswer>((resolve, reject) => {
      const timer = setTimeout(() => {
        conn.pending.delete(id);
        reject(new FleetlabError('CLOUD_ERR_DEVICE_TIMEOUT', `device ${uuid} did not answer ${request.method} ${request.path} within ${timeoutMs} ms`));
      }, timeoutMs);
      conn.pending.set(id, {
        resolve: (answer) => (clearTimeout(timer), resolve(answer)),
        reject: (err) => (clearTimeout(timer), reject(err)),
      });
      conn.socket.send(JSON.stringify({ type: 'request', id, ...request } satisfies TunnelRequest));
    });
  }

  async close(): Promise<void> {
    // The replica leaves the directory as a whole (every device offline in one statement).
    this.closing = true;
    clearInterval(this.heartbeat);
    for (const { socket } of this.connections.values()) socket.terminate();
    await new Promise<void>((r) => this.wss.close(() => r()));
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const match = tunnelPath.exec(new URL(req.url ?? '/', 'http://x').pathname);
    if (!match) return refuse(socket, new FleetlabError('CLOUD_ERR_NOT_FOUND', `Not found: no tunnel at ${req.url ?? ''}`));
    const uuid = match[1]!;
    const key = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    const device = key ? await this.deps.authenticate(uuid, key).catch(() => null) : null;
    if (!device) return refuse(socket, new FleetlabError('CLOUD_ERR_UNAUTHORIZED', 'Unauthorized'));
    this.wss.handleUpgrade(req, socket, head, (ws) => this.adopt(uuid, device.deviceId, ws));
  }

  private adopt(uuid: string, deviceId: number, socket: WebSocket): void {
    // A device that reconnects after a partition may still have a half-open old socket here.
    this.connections.get(uuid)?.socket.terminate();
    this.record(uuid, deviceId, true);
    const conn: Connection = { deviceId, socket, pending: new Map(), nextId: 1 };
    this.connections.set(uuid, conn);
    this.alive.add(socket);
    socket.on('pong', () => this.alive.add(socket));
    socket.on('message', (data) => {
      let frame: unknown;
      try {
        frame = JSON.parse(data.toString());
      } catch {
        return;
      }
      if (!Value.Check(TunnelResponse, frame)) return;
      conn.pending.get(frame.id)?.resolve({ status: frame.status, body: frame.body, ...(frame.contentType ? { contentType: frame.contentType } : {}) });
      conn.pending.delete(frame.id);
    });
    socket.on('close', () => {
      // The device went away mid-call: the call fails now rather than at its timeout.
      for (const p of conn.pending.values()) p.reject(new FleetlabError('CLOUD_ERR_DEVICE_TIMEOUT', `device ${uuid} disconnected before answering`));
      conn.pending.clear();
      if (this.connections.get(uuid) !== conn) return;
      this.connections.delete(uuid);
      if (this.closing) return;
      this.record(uuid, deviceId, false);
    });
    socket.on('error', () => socket.terminate());
  }
}
