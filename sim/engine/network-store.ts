/**
 * The engine's networks: the predefined bridge/host/none and user networks, created, listed
 * and removed with dockerd's rules and messages. A user network gets the subnet (and gateway)
 * its create asks for, else the first of dockerd's default pools that overlaps no other
 * network (172.18.0.0/16 on, then 192.168.0.0/20s); overlapping subnets are refused.
 */
import { firstHost, formatIpv4, formatIpv4Subnet, inIpv4Subnet, ipv4SubnetsOverlap, parseIpv4, parseIpv4Subnet, type Ipv4Subnet } from '../../src/ipv4.js';
import { anyOf, labelsMatch, type Filters } from './filters.js';
import { badParameter, conflict, EngineApiError, noSuchNetwork, serverError } from './api-error.js';
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
  IPAM?: { Driver?: string; Config?: Array<{ Subnet?: string; Gateway?: string }> | null; Options?: Record<string, string> | null } | null;
}

/** dockerd 20.10's default address pools for local networks. */
function defaultPools(): Ipv4Subnet[] {
  const pools: Ipv4Subnet[] = [];
  for (let octet = 17; octet <= 31; octet++) pools.push({ base: parseIpv4(`172.${octet}.0.0`)!, prefix: 16 });
  for (let third = 0; third < 256; third += 16) pools.push({ base: parseIpv4(`192.168.${third}.0`)!, prefix: 20 });
  return pools;
}

type Addressing = Pick<NetworkRecord, 'subnet' | 'gateway' | 'ipam'>;

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
        gateway: subnet ? '172.17.0.1' : '', ipam: { config: subnet ? [{ Subnet: subnet }] : [], options: null },
        options: name === 'bridge' ? { 'com.docker.network.bridge.default_bridge': 'true' } : {}, predefined: true,
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
    const n: NetworkRecord = {
      id: randomId(), name, driver: body.Driver || 'bridge', created: isoAt(this.deps.clock()), labels: body.Labels ?? {}, internal: !!body.Internal,
      attachable: !!body.Attachable, ...this.addressing(body.IPAM?.Config?.[0]), options: body.Options ?? {}, predefined: false,
    };
    this.networks.set(n.id, n);
    this.deps.events.emit('network', 'create', n.id, { name: n.name, type: n.driver });
    void this.deps.save();
    return n;
  }

  private overlapsAny(subnet: Ipv4Subnet): boolean {
    return this.records().some((n) => {
      const other = n.subnet ? parseIpv4Subnet(n.subnet) : undefined;
      return other !== undefined && ipv4SubnetsOverlap(other, subnet);
    });
  }

  /** The subnet and gateway asked for, checked as dockerd checks them, or the first free default pool. */
  private addressing(asked: { Subnet?: string; Gateway?: string } | undefined): Addressing {
    if (asked?.Subnet) {
      const subnet = parseIpv4Subnet(asked.Subnet);
      if (!subnet) throw serverError(`Invalid subnet ${asked.Subnet} : invalid CIDR address: ${asked.Subnet}`);
      if (this.overlapsAny(subnet)) throw new EngineApiError(403, 'Pool overlaps with other one on this address space');
      const gateway = asked.Gateway ? parseIpv4(asked.Gateway) : firstHost(subnet);
      if (gateway === undefined || !inIpv4Subnet(gateway, subnet)) throw serverError(`failed to allocate gateway (${asked.Gateway}): Requested address is out of range`);
      return { subnet: asked.Subnet, gateway: formatIpv4(gateway), ipam: { config: [{ Subnet: asked.Subnet, ...(asked.Gateway ? { Gateway: asked.Gateway } : {}) }], options: null } };
    }
    const pool = defaultPools().find((p) => !this.overlapsAny(p));
    if (!pool) throw serverError('could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network');
    const subnet = formatIpv4Subnet(pool);
    const gateway = formatIpv4(firstHost(pool));
    return { subnet, gateway, ipam: { config: [{ Subnet: subnet, Gateway: gateway }], options: {} } };
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
