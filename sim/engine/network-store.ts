/**
 * The engine's networks: the predefined bridge/host/none and user networks, one /16 each
 * (172.18.0.0/16 on), created, listed and removed with dockerd's rules and messages.
 */
import { anyOf, labelsMatch, type Filters } from './filters.js';
import { badParameter, conflict, EngineApiError, noSuchNetwork } from './api-error.js';
import type { EventBus } from './events.js';
import { isoAt, randomId, sha256, type NetworkRecord, type WallClock } from './model.js';

export interface NetworkStoreDeps {
  dataDir: string;
  events: EventBus;
  clock: WallClock;
  save: () => Promise<void>;
  /** Ids of the running containers attached to the network. */
  activeEndpoints: (n: NetworkRecord) => string[];
}

export interface CreateNetworkBody {
  Name?: string;
  Driver?: string;
  Labels?: Record<string, string> | null;
  CheckDuplicate?: boolean;
  Internal?: boolean;
  Attachable?: boolean;
  Options?: Record<string, string> | null;
}

export class NetworkStore {
  private readonly networks = new Map<string, NetworkRecord>();

  constructor(private readonly deps: NetworkStoreDeps) {}

  load(records: NetworkRecord[]): void {
    for (const n of records) this.networks.set(n.id, n);
  }

  /** Adds bridge, host and none unless the saved state has them. */
  ensurePredefined(): void {
    for (const [name, driver, subnet] of [['bridge', 'bridge', '172.17.0.0/16'], ['host', 'host', ''], ['none', 'null', '']] as const) {
      if (this.byName(name)) continue;
      const id = sha256(`predefined-${name}-${this.deps.dataDir}`);
      this.networks.set(id, {
        id, name, driver, created: isoAt(this.deps.clock()), labels: {}, internal: false, attachable: false, subnet,
        gateway: subnet ? '172.17.0.1' : '', options: name === 'bridge' ? { 'com.docker.network.bridge.default_bridge': 'true' } : {}, predefined: true,
      });
    }
  }

  records(): NetworkRecord[] {
    return [...this.networks.values()];
  }

  byId(id: string): NetworkRecord | undefined {
    return this.networks.get(id);
  }

  byName(name: string): NetworkRecord | undefined {
    return this.records().find((n) => n.name === name);
  }

  find(ref: string): NetworkRecord {
    const exact = this.networks.get(ref) ?? this.byName(ref);
    if (exact) return exact;
    const prefixed = this.records().filter((n) => n.id.startsWith(ref));
    if (prefixed.length === 1) return prefixed[0]!;
    throw noSuchNetwork(ref);
  }

  create(body: CreateNetworkBody): NetworkRecord {
    const name = body.Name;
    if (!name) throw badParameter('invalid name: ');
    const same = this.byName(name);
    if (same?.predefined) throw new EngineApiError(403, `${name} is a pre-defined network and cannot be created`);
    if (same) throw conflict(`network with name ${name} already exists`);
    const used = new Set(this.records().map((n) => n.subnet));
    let octet = 18;
    while (used.has(`172.${octet}.0.0/16`) && octet < 255) octet++;
    const n: NetworkRecord = {
      id: randomId(), name, driver: body.Driver || 'bridge', created: isoAt(this.deps.clock()), labels: body.Labels ?? {}, internal: !!body.Internal,
      attachable: !!body.Attachable, subnet: `172.${octet}.0.0/16`, gateway: `172.${octet}.0.1`, options: body.Options ?? {}, predefined: false,
    };
    this.networks.set(n.id, n);
    this.deps.events.emit('network', 'create', n.id, { name: n.name, type: n.driver });
    void this.deps.save();
    return n;
  }

  list(f: Filters): NetworkRecord[] {
    return this.records().filter(
      (n) =>
        labelsMatch(f, n.labels) &&
        anyOf(f, 'name', (v) => n.name.includes(v)) &&
        anyOf(f, 'id', (v) => n.id.startsWith(v)) &&
        anyOf(f, 'driver', (v) => n.driver === v) &&
        anyOf(f, 'type', (v) => (v === 'builtin') === n.predefined),
    );
  }

  /** Removes a network no running container uses; returns it for the caller to detach. */
  remove(ref: string): NetworkRecord {
    const n = this.find(ref);
    if (n.predefined) throw new EngineApiError(403, `${n.name} is a pre-defined network and cannot be removed`);
    if (this.deps.activeEndpoints(n).length) throw new EngineApiError(403, `error while removing network: network ${n.name} id ${n.id} has active endpoints`);
    this.networks.delete(n.id);
    this.deps.events.emit('network', 'destroy', n.id, { name: n.name, type: n.driver });
    void this.deps.save();
    return n;
  }
}
