/**
 * The simulated engine's domain: containers and their lifecycle, composed with the image,
 * volume and network stores, the event bus and the state file. No HTTP here (http-server.ts
 * maps requests onto it); containers are simulated processes (sim-process.ts).
 *
 * Restart policies follow dockerd: `always` and `unless-stopped` restart after any exit that
 * was not a client's stop/kill, `on-failure[:N]` after a non-zero exit (at most N times),
 * with dockerd's back-off (100 ms doubling to 1 min, reset after 10 s of running).
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { formatIpv4, parseIpv4, parseIpv4Subnet, subnetSize } from '../../src/ipv4.js';
import { badParameter, conflict, EngineApiError, noSpace, noSuchContainer, noSuchImage, noSuchNetwork, serverError } from './api-error.js';
import { EventBus } from './events.js';
import { anyOf, labelsMatch, type Filters } from './filters.js';
import { ImageStore } from './image-store.js';
import { LogBook } from './logs.js';
import {
  DEFAULT_HISTORY, isoAt, normaliseRef, randomId, ZERO_TIME,
  type ContainerRecord, type HealthConfig, type ImageRecord, type MountRecord, type NetworkRecord, type EngineHistory, type RestartPolicyName, type WallClock,
} from './model.js';
import { HealthMonitor, healthcheckProblem, mergeHealthcheck, probeCommand } from './health.js';
import { behaviourOf } from './process-model.js';
import type { FaultSet } from './scenario.js';
import { parseSignal, signalNumberOf, SimProcess, type Signal } from './sim-process.js';
import { NetworkStore } from './network-store.js';
import { StateFile, type PersistedState } from './state-file.js';
import { VolumeStore } from './volume-store.js';

const RESTART_BACKOFF_START_MS = 100;
const RESTART_BACKOFF_MAX_MS = 60_000;
const RESTART_RESET_AFTER_MS = 10_000;
const DEFAULT_STOP_TIMEOUT_S = 10;

interface Runtime {
  proc?: SimProcess;
  health?: HealthMonitor;
  restartTimer?: NodeJS.Timeout;
  backoffMs: number;
  log: LogBook;
  /** Woken on every exit (with whether a restart follows) and on removal. */
  exitWaiters: Array<(code: number, restarting: boolean) => void>;
  removeWaiters: Array<() => void>;
}

export class NotModified extends Error {}

export interface CreateContainerBody {
  Image?: string;
  Cmd?: string[] | string | null;
  Entrypoint?: string[] | string | null;
  Env?: string[] | null;
  Labels?: Record<string, string> | null;
  WorkingDir?: string;
  Tty?: boolean;
  Hostname?: string;
  User?: string;
  StopSignal?: string;
  StopTimeout?: number;
  Healthcheck?: HealthConfig | null;
  ExposedPorts?: Record<string, Record<string, never>> | null;
  HostConfig?: {
    Binds?: string[] | null;
    Mounts?: Array<{ Type?: string; Source?: string; Target?: string; ReadOnly?: boolean }> | null;
    NetworkMode?: string;
    RestartPolicy?: { Name?: string; MaximumRetryCount?: number };
    [k: string]: unknown;
  };
  NetworkingConfig?: { EndpointsConfig?: Record<string, { Aliases?: string[] | null }> };
}

export class SimEngine {
  readonly events: EventBus;
  readonly images: ImageStore;
  readonly volumes: VolumeStore;
  readonly networks: NetworkStore;
  private readonly containers = new Map<string, ContainerRecord>();
  private readonly runtimes = new Map<string, Runtime>();
  /** Containers that were running when the engine last went away (restart policies decide at boot). */
  private readonly diedWithEngine = new Set<string>();
  private readonly store: StateFile;
  private nextPid = 4000;
  private closed = false;

  constructor(
    readonly dataDir: string,
    readonly faults: FaultSet,
    readonly clock: WallClock = Date.now,
    private readonly history: EngineHistory = DEFAULT_HISTORY,
  ) {
    mkdirSync(join(dataDir, 'containers'), { recursive: true });
    this.events = new EventBus(clock, history.events);
    const save = () => this.save();
    const all = () => [...this.containers.values()];
    this.images = new ImageStore({ events: this.events, save, usersOf: (id) => all().filter((c) => c.imageId === id).map((c) => c.id) });
    this.volumes = new VolumeStore({ dataDir, faults, events: this.events, clock, save, usersOf: (name) => all().filter((c) => c.mounts.some((m) => m.Type === 'volume' && m.Name === name)).map((c) => c.id) });
    this.networks = new NetworkStore({ dataDir, events: this.events, clock, save, activeEndpoints: (n) => this.networkContainers(n).map((c) => c.id) });
    this.store = new StateFile(dataDir, () => this.persisted());
    const saved = StateFile.read(dataDir);
    if (saved) this.restore(saved);
    this.networks.ensurePredefined();
  }

  /* ------------------------------------------------------------ persistence */

  private persisted(): PersistedState {
    return {
      version: 1,
      images: this.images.records(),
      containers: [...this.containers.values()],
      volumes: this.volumes.records(),
      networks: this.networks.records(),
    };
  }

  private restore(saved: PersistedState): void {
    this.images.load(saved.images);
    this.volumes.load(saved.volumes);
    this.networks.load(saved.networks);
    for (const c of saved.containers) {
      // The engine went away under a running container: it died with it.
      if (c.state.status === 'running' || c.state.status === 'restarting') {
        c.state = { ...c.state, status: 'exited', exitCode: c.state.status === 'running' ? 137 : c.state.exitCode, pid: 0, finishedAt: isoAt(this.clock()) };
        // As any stop leaves it (stopHealthchecks).
        if (c.state.health) c.state.health = { ...c.state.health, Status: 'unhealthy', FailingStreak: 0 };
        this.diedWithEngine.add(c.id);
      }
      this.containers.set(c.id, c);
    }
  }

  save(): Promise<void> {
    return this.store.save();
  }

  /** Starts what dockerd starts at boot: containers whose restart policy says so. */
  boot(): void {
    for (const c of this.containers.values()) {
      const died = this.diedWithEngine.delete(c.id);
      const policy = c.hostConfig.RestartPolicy.Name;
      const restart = policy === 'always' || (policy === 'unless-stopped' && !c.state.manuallyStopped) || (died && policy === 'on-failure' && c.state.exitCode !== 0);
      if (restart) this.startAnew(c);
    }
  }

  /**
   * A start by a client, or by the engine at its boot: as dockerd, a new run, whose restart
   * count and back-off begin again and which a stop before it no longer holds back.
   */
  private startAnew(c: ContainerRecord): void {
    c.state.manuallyStopped = false;
    c.restartCount = 0;
    this.runtime(c.id).backoffMs = RESTART_BACKOFF_START_MS;
    this.startContainer(c);
  }

  /**
   * Stops the engine as dockerd stops with live-restore off: running containers get SIGTERM
   * and, after their stop timeout, SIGKILL. No restart policy fires during shutdown.
   */
  async shutdown(): Promise<void> {
    this.closed = true;
    const running = [...this.containers.values()].filter((c) => c.state.status === 'running' || c.state.status === 'restarting');
    await Promise.all(running.map((c) => this.stopContainer(c, undefined, { shutdown: true }).catch(() => undefined)));
    for (const rt of this.runtimes.values()) {
      rt.proc?.dispose();
      rt.health?.stop();
      if (rt.restartTimer) clearTimeout(rt.restartTimer);
    }
    await this.store.save();
    await this.store.flush();
  }

  /* ------------------------------------------------------------ lookups */

  findContainer(ref: string): ContainerRecord {
    const r = ref.replace(/^\//, '');
    const byId = this.containers.get(r);
    if (byId) return byId;
    for (const c of this.containers.values()) if (c.name === r) return c;
    const prefixed = [...this.containers.values()].filter((c) => c.id.startsWith(r));
    if (prefixed.length === 1 && r.length > 0) return prefixed[0]!;
    if (prefixed.length > 1) throw badParameter(`multiple IDs found with provided prefix: ${r}`);
    throw noSuchContainer(ref);
  }

  findImage(ref: string): ImageRecord | undefined {
    return this.images.find(ref);
  }

  findNetwork(ref: string): NetworkRecord {
    return this.networks.find(ref);
  }

  private runtime(id: string): Runtime {
    let rt = this.runtimes.get(id);
    if (!rt) {
      rt = { backoffMs: RESTART_BACKOFF_START_MS, log: new LogBook(join(this.dataDir, 'containers', id, 'log.jsonl'), this.clock, this.history.logLines), exitWaiters: [], removeWaiters: [] };
      this.runtimes.set(id, rt);
    }
    return rt;
  }

  logBook(c: ContainerRecord): LogBook {
    return this.runtime(c.id).log;
  }

  /* ------------------------------------------------------------ networks */  /* ------------------------------------------------------------ networks */

  networkContainers(n: NetworkRecord): ContainerRecord[] {
    return [...this.containers.values()].filter((c) => c.state.status === 'running' && c.networks[n.name]);
  }

  removeNetwork(ref: string): void {
    const n = this.networks.remove(ref);
    for (const c of this.containers.values()) delete c.networks[n.name];
  }

  connect(ref: string, containerRef: string, aliases: string[] | null): void {
    const n = this.findNetwork(ref);
    const c = this.findContainer(containerRef);
    if (c.networks[n.name]) throw new EngineApiError(403, `endpoint with name ${c.name} already exists in network ${n.name}`);
    // As at create, dockerd adds the short id to the aliases on a user network.
    const shortId = c.id.slice(0, 12);
    c.networks[n.name] = this.endpoint(n, n.predefined || aliases?.includes(shortId) ? aliases : [...(aliases ?? []), shortId]);
    if (c.state.status === 'running') this.assignAddress(c, n.name);
    this.events.emit('network', 'connect', n.id, { container: c.id, name: n.name, type: n.driver });
    void this.save();
  }

  disconnect(ref: string, containerRef: string): void {
    const n = this.findNetwork(ref);
    const c = this.findContainer(containerRef);
    if (!c.networks[n.name]) throw new EngineApiError(403, `container ${c.id} is not connected to network ${n.name}`);
    delete c.networks[n.name];
    this.events.emit('network', 'disconnect', n.id, { container: c.id, name: n.name, type: n.driver });
    void this.save();
  }

  private endpoint(n: NetworkRecord, aliases: string[] | null) {
    return { networkId: n.id, endpointId: '', aliases, ip: '', gateway: '', mac: '' };
  }

  /** The lowest free address of the network's subnet but its gateway and broadcast, as dockerd's IPAM gives. */
  private assignAddress(c: ContainerRecord, networkName: string): void {
    const ep = c.networks[networkName];
    const n = this.networks.byName(networkName);
    const subnet = n?.subnet ? parseIpv4Subnet(n.subnet) : undefined;
    if (!ep || !n || !subnet) return;
    const taken = new Set([...this.containers.values()].map((x) => x.networks[networkName]?.ip).filter(Boolean));
    const gateway = parseIpv4(n.gateway);
    let address = subnet.base + 1;
    const broadcast = subnet.base + subnetSize(subnet) - 1;
    while (address < broadcast && (address === gateway || taken.has(formatIpv4(address)))) address++;
    if (address >= broadcast) return;
    ep.ip = formatIpv4(address);
    ep.prefixLen = subnet.prefix;
    ep.gateway = n.gateway;
    ep.endpointId = randomId();
    const octets = ep.ip.split('.').map(Number);
    ep.mac = `02:42:${octets.map((o) => o.toString(16).padStart(2, '0')).join(':')}`;
  }

  /* ------------------------------------------------------------ containers */

  createContainer(name: string | null, body: CreateContainerBody): ContainerRecord {
    if (!body.Image) throw badParameter('No command specified');
    const image = this.findImage(body.Image);
    if (!image) throw noSuchImage(normaliseRef(body.Image));
    if (name !== null && !/^\/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$/.test(name)) throw badParameter(`Invalid container name (${name}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed`);
    const cleanName = name?.replace(/^\//, '') ?? `sim_${randomId().slice(0, 12)}`;
    const clash = [...this.containers.values()].find((c) => c.name === cleanName);
    if (clash) {
      throw conflict(`Conflict. The container name "/${cleanName}" is already in use by container "${clash.id}". You have to remove (or rename) that container to be able to reuse that name.`);
    }
    const host = body.HostConfig ?? {};
    const policyName = (host.RestartPolicy?.Name ?? '') as RestartPolicyName;
    if (!['', 'no', 'always', 'unless-stopped', 'on-failure'].includes(policyName)) throw badParameter(`invalid restart policy '${policyName}'`);
    const networkMode = host.NetworkMode || 'default';
    const netName = networkMode === 'default' ? 'bridge' : networkMode;
    const network = this.networks.byName(netName) ?? this.networks.byId(netName);
    if (!network && !netName.startsWith('container:')) throw noSuchNetwork(netName);
    const id = randomId();
    if (this.faults.diskFull) throw serverError(noSpace(`mkdir /var/lib/docker/containers/${id}`));
    if (body.WorkingDir && !body.WorkingDir.startsWith('/')) throw badParameter(`the working directory '${body.WorkingDir}' is invalid, it needs to be an absolute path`);
    const healthProblem = healthcheckProblem(body.Healthcheck);
    if (healthProblem) throw badParameter(healthProblem);
    if (body.StopSignal && signalNumberOf(body.StopSignal) === undefined) throw badParameter(`Invalid signal: ${body.StopSignal}`);
    const mounts = this.mountsOf(host);
    const cmd = typeof body.Cmd === 'string' ? [body.Cmd] : body.Cmd;
    const entrypoint = typeof body.Entrypoint === 'string' ? [body.Entrypoint] : body.Entrypoint;
    const healthcheck = mergeHealthcheck(image.config.Healthcheck, body.Healthcheck);
    const c: ContainerRecord = {
      id,
      name: cleanName,
      created: isoAt(this.clock()),
      imageId: image.id,
      imageRef: body.Image,
      config: {
        Hostname: body.Hostname || id.slice(0, 12),
        Env: mergeEnv(image.config.Env, body.Env ?? null),
        // As dockerd merges them: an empty Entrypoint (`[]`) runs the command without one, a
        // missing one keeps the image's; the image's Cmd only when neither is given.
        Cmd: cmd && cmd.length ? cmd : entrypoint && entrypoint.length ? null : image.config.Cmd,
        Entrypoint: entrypoint ?? image.config.Entrypoint,
        Image: body.Image,
        Labels: { ...(image.config.Labels ?? {}), ...(body.Labels ?? {}) },
        WorkingDir: body.WorkingDir || image.config.WorkingDir,
        Tty: !!body.Tty,
        User: body.User ?? '',
        ...(body.StopSignal ? { StopSignal: body.StopSignal } : {}),
        ...(body.StopTimeout !== undefined ? { StopTimeout: body.StopTimeout } : {}),
        ...(healthcheck ? { Healthcheck: healthcheck } : {}),
        ...(body.ExposedPorts && Object.keys(body.ExposedPorts).length ? { ExposedPorts: body.ExposedPorts } : {}),
      },
      hostConfig: {
        ...host,
        Binds: host.Binds ?? null,
        NetworkMode: networkMode,
        RestartPolicy: { Name: policyName, MaximumRetryCount: host.RestartPolicy?.MaximumRetryCount ?? 0 },
      },
      mounts,
      networks: network ? { [network.name]: this.endpoint(network, body.NetworkingConfig?.EndpointsConfig?.[network.name]?.Aliases ?? null) } : {},
      state: { status: 'created', pid: 0, exitCode: 0, error: '', startedAt: ZERO_TIME, finishedAt: ZERO_TIME, manuallyStopped: false },
      restartCount: 0,
    };
    // Aliases in NetworkingConfig apply to a user network; dockerd also lists the short id.
    const ep = network ? c.networks[network.name] : undefined;
    if (ep && network && !network.predefined) ep.aliases = [...(ep.aliases ?? []), id.slice(0, 12)];
    this.containers.set(id, c);
    this.runtime(id);
    this.events.emit('container', 'create', id, this.containerAttributes(c));
    void this.save();
    return c;
  }

  private mountsOf(host: NonNullable<CreateContainerBody['HostConfig']>): MountRecord[] {
    const mounts: MountRecord[] = [];
    for (const bind of host.Binds ?? []) {
      const [source = '', dest = '', mode = ''] = bind.split(':');
      if (!dest) throw badParameter(`invalid volume specification: '${bind}'`);
      const rw = !mode.split(',').includes('ro');
      if (source.startsWith('/')) mounts.push({ Type: 'bind', Source: source, Destination: dest, Mode: mode, RW: rw, Propagation: 'rprivate' });
      else {
        const v = this.volumes.get(source) ?? this.volumes.create({ Name: source });
        mounts.push({ Type: 'volume', Name: v.name, Source: v.mountpoint, Destination: dest, Driver: v.driver, Mode: mode || 'z', RW: rw, Propagation: '' });
      }
    }
    for (const m of host.Mounts ?? []) {
      if (!m.Target) throw badParameter('Target must not be empty');
      if (m.Type === 'bind' && !existsSync(m.Source ?? '')) throw badParameter(`invalid mount config for type "bind": bind source path does not exist: ${m.Source ?? ''}`);
      if (m.Type === 'bind') mounts.push({ Type: 'bind', Source: m.Source ?? '', Destination: m.Target, Mode: '', RW: !m.ReadOnly, Propagation: 'rprivate' });
      else {
        const v = (m.Source && this.volumes.get(m.Source)) || this.volumes.create({ Name: m.Source || randomId() });
        mounts.push({ Type: 'volume', Name: v.name, Source: v.mountpoint, Destination: m.Target, Driver: v.driver, Mode: 'z', RW: !m.ReadOnly, Propagation: '' });
      }
    }
    return mounts;
  }

  containerAttributes(c: ContainerRecord, extra: Record<string, string> = {}): Record<string, string> {
    return { ...c.config.Labels, image: c.imageRef, name: c.name, ...extra };
  }

  listContainers(all: boolean, f: Filters): ContainerRecord[] {
    for (const s of f.get('status') ?? []) {
      if (!['created', 'restarting', 'running', 'removing', 'paused', 'exited', 'dead'].includes(s)) throw badParameter(`Invalid filter 'status=${s}'`);
    }
    for (const h of f.get('health') ?? []) {
      if (!['starting', 'healthy', 'unhealthy', 'none'].includes(h)) throw badParameter(`Unrecognised filter value for health: ${h}`);
    }
    return [...this.containers.values()]
      .filter((c) => all || c.state.status === 'running' || c.state.status === 'restarting' || f.has('status'))
      .filter(
        (c) =>
          labelsMatch(f, c.config.Labels) &&
          anyOf(f, 'name', (v) => new RegExp(v).test(c.name) || new RegExp(v).test(`/${c.name}`)) &&
          anyOf(f, 'id', (v) => c.id.startsWith(v)) &&
          anyOf(f, 'status', (v) => v === c.state.status) &&
          anyOf(f, 'ancestor', (v) => this.findImage(v)?.id === c.imageId) &&
          anyOf(f, 'network', (v) => Object.entries(c.networks).some(([name, ep]) => name === v || ep.networkId.startsWith(v))) &&
          anyOf(f, 'volume', (v) => c.mounts.some((m) => m.Name === v || m.Destination === v)) &&
          anyOf(f, 'exited', (v) => c.state.status === 'exited' && String(c.state.exitCode) === v) &&
          anyOf(f, 'health', (v) => (c.state.health?.Status ?? 'none') === v),
      )
      .sort((a, b) => Date.parse(b.created) - Date.parse(a.created));
  }

  commandOf(c: ContainerRecord): string[] {
    return [...(c.config.Entrypoint ?? []), ...(c.config.Cmd ?? [])];
  }

  start(ref: string): void {
    const c = this.findContainer(ref);
    if (c.state.status === 'running' || c.state.status === 'restarting') throw new NotModified();
    if (c.state.status === 'removing' || c.state.status === 'dead') throw conflict(`cannot start a container that has been removed`);
    if (this.commandOf(c).length === 0) throw badParameter('No command specified');
    const taken = this.portTaken(c);
    if (taken) {
      // As dockerd: the container stays created, with the reason in State.Error.
      c.state.error = taken;
      void this.save();
      throw serverError(taken);
    }
    this.startAnew(c);
  }

  /**
   * Why dockerd would refuse to publish `c`'s ports while the others run, or undefined: its
   * port allocator refuses an address and port another running container holds, and its
   * userland proxy cannot bind the wildcard where another holds a specific address, or the
   * other way round. Nothing is bound here; the message is dockerd 20.10's.
   */
  private portTaken(c: ContainerRecord): string | undefined {
    const bindingsOf = (x: ContainerRecord) =>
      Object.entries((x.hostConfig.PortBindings ?? {}) as Record<string, Array<{ HostIp?: string; HostPort?: string }> | null>).flatMap(([key, list]) =>
        (list ?? []).filter((b) => b.HostPort).map((b) => ({ proto: key.split('/')[1] ?? 'tcp', ip: b.HostIp || '0.0.0.0', port: b.HostPort! })));
    const held = [...this.containers.values()].filter((o) => o.id !== c.id && (o.state.status === 'running' || o.state.status === 'restarting')).flatMap(bindingsOf);
    const endpoint = `driver failed programming external connectivity on endpoint ${c.name} (${randomId()})`;
    for (const b of bindingsOf(c)) {
      const same = held.filter((h) => h.proto === b.proto && h.port === b.port);
      if (same.some((h) => h.ip === b.ip)) return `${endpoint}: Bind for ${b.ip}:${b.port} failed: port is already allocated`;
      if (same.some((h) => h.ip === '0.0.0.0' || b.ip === '0.0.0.0')) return `${endpoint}: Error starting userland proxy: listen ${b.proto}4 ${b.ip}:${b.port}: bind: address already in use`;
    }
    return undefined;
  }

  private startContainer(c: ContainerRecord): void {
    const rt = this.runtime(c.id);
    if (rt.restartTimer) clearTimeout(rt.restartTimer);
    rt.restartTimer = undefined;
    const fault = this.faults.takeContainer({ name: c.name, image: c.imageRef, labels: c.config.Labels });
    const behaviour = behaviourOf(this.commandOf(c), c.config.Labels);
    const played = fault ? { ...behaviour, exitAfterMs: fault.afterMs, exitCode: fault.exitCode } : behaviour;
    c.state = { ...c.state, status: 'running', pid: this.nextPid++, exitCode: 0, error: '', startedAt: isoAt(this.clock()), finishedAt: c.state.finishedAt };
    for (const name of Object.keys(c.networks)) {
      this.assignAddress(c, name);
      const n = this.networks.byName(name);
      if (n) this.events.emit('network', 'connect', n.id, { container: c.id, name: n.name, type: n.driver });
    }
    for (const m of c.mounts) if (m.Type === 'volume') this.events.emit('volume', 'mount', m.Name!, { container: c.id, destination: m.Destination, driver: 'local', propagation: '', 'read/write': String(m.RW) });
    const proc = new SimProcess(played, rt.log, (code) => this.onExit(c, code));
    rt.proc = proc;
    this.events.emit('container', 'start', c.id, this.containerAttributes(c));
    this.startHealthchecks(c, rt);
    void this.save();
    proc.run();
  }

  /** As dockerd at each start: a container with a probe to run is `starting` again, its past results kept. */
  private startHealthchecks(c: ContainerRecord, rt: Runtime): void {
    rt.health?.stop();
    rt.health = undefined;
    const command = probeCommand(c.config.Healthcheck);
    if (!command) return;
    c.state.health ??= { Status: 'starting', FailingStreak: 0, Log: [] };
    rt.health = new HealthMonitor({
      config: c.config.Healthcheck!,
      command,
      record: c.state.health,
      startedAt: Date.parse(c.state.startedAt),
      clock: this.clock,
      event: (action, extra) => this.events.emit('container', action, c.id, this.containerAttributes(c, extra)),
      changed: () => void this.save(),
    });
  }

  /** dockerd leaves a stopped container's health `unhealthy`, its streak reset. */
  private stopHealthchecks(c: ContainerRecord, rt: Runtime): void {
    rt.health?.stop();
    rt.health = undefined;
    if (c.state.health) c.state.health = { ...c.state.health, Status: 'unhealthy', FailingStreak: 0 };
  }

  private onExit(c: ContainerRecord, code: number, opts: { shutdown?: boolean } = {}): void {
    const rt = this.runtime(c.id);
    rt.proc = undefined;
    this.stopHealthchecks(c, rt);
    const ranMs = this.clock() - Date.parse(c.state.startedAt);
    c.state = { ...c.state, status: 'exited', pid: 0, exitCode: code, finishedAt: isoAt(this.clock()) };
    this.events.emit('container', 'die', c.id, this.containerAttributes(c, { exitCode: String(code) }));
    for (const [name, ep] of Object.entries(c.networks)) {
      const n = this.networks.byId(ep.networkId);
      ep.ip = '';
      ep.gateway = '';
      ep.endpointId = '';
      ep.mac = '';
      if (n) this.events.emit('network', 'disconnect', n.id, { container: c.id, name, type: n.driver });
    }
    for (const m of c.mounts) if (m.Type === 'volume') this.events.emit('volume', 'unmount', m.Name!, { container: c.id, driver: 'local' });
    const policy = c.hostConfig.RestartPolicy;
    const restart =
      !opts.shutdown && !this.closed && !c.state.manuallyStopped &&
      (policy.Name === 'always' || policy.Name === 'unless-stopped' || (policy.Name === 'on-failure' && code !== 0 && (policy.MaximumRetryCount === 0 || c.restartCount < policy.MaximumRetryCount)));
    if (restart) {
      if (ranMs >= RESTART_RESET_AFTER_MS) rt.backoffMs = RESTART_BACKOFF_START_MS;
      const delay = rt.backoffMs;
      rt.backoffMs = Math.min(RESTART_BACKOFF_MAX_MS, rt.backoffMs * 2);
      c.state.status = 'restarting';
      rt.restartTimer = setTimeout(() => {
        rt.restartTimer = undefined;
        if (c.state.status !== 'restarting' || this.closed) return;
        c.restartCount += 1;
        this.startContainer(c);
        this.events.emit('container', 'restart', c.id, this.containerAttributes(c));
      }, delay);
    }
    for (const w of rt.exitWaiters.splice(0)) w(code, restart);
    // HostConfig.AutoRemove (`docker run --rm`): the container goes once it has exited.
    if (!restart && c.hostConfig.AutoRemove === true && !opts.shutdown) {
      setImmediate(() => {
        try {
          if (this.containers.has(c.id)) this.remove(c.id, { force: true, volumes: true });
        } catch {
          // an anonymous volume still used elsewhere stays, as in dockerd
        }
      });
    }
    void this.save();
  }

  /** Resolves once the container has stopped (TERM, then KILL after the timeout). */
  async stop(ref: string, timeoutS: number | undefined): Promise<void> {
    const c = this.findContainer(ref);
    if (c.state.status !== 'running' && c.state.status !== 'restarting') throw new NotModified();
    await this.stopContainer(c, timeoutS);
  }

  private async stopContainer(c: ContainerRecord, timeoutS: number | undefined, opts: { shutdown?: boolean } = {}): Promise<void> {
    const rt = this.runtime(c.id);
    if (!opts.shutdown) c.state.manuallyStopped = true;
    if (c.state.status === 'restarting') {
      if (rt.restartTimer) clearTimeout(rt.restartTimer);
      rt.restartTimer = undefined;
      c.state.status = 'exited';
      this.events.emit('container', 'stop', c.id, this.containerAttributes(c));
      void this.save();
      return;
    }
    const proc = rt.proc;
    if (!proc) return;
    const exited = new Promise<void>((r) => rt.exitWaiters.push(() => r()));
    // The container's own stop signal (compose's stop_signal); one the model does not play is ignored, as by a process without a handler.
    const stopSignal = c.config.StopSignal ?? 'SIGTERM';
    this.events.emit('container', 'kill', c.id, this.containerAttributes(c, { signal: String(signalNumberOf(stopSignal)) }));
    const modelled = parseSignal(stopSignal);
    if (!modelled || !proc.signal(modelled)) {
      const t = timeoutS ?? c.config.StopTimeout ?? DEFAULT_STOP_TIMEOUT_S;
      const timer = t < 0 ? undefined : setTimeout(() => {
        this.events.emit('container', 'kill', c.id, this.containerAttributes(c, { signal: '9' }));
        proc.signal('KILL');
      }, t * 1000);
      await exited;
      if (timer) clearTimeout(timer);
    } else await exited;
    this.events.emit('container', 'stop', c.id, this.containerAttributes(c));
  }

  kill(ref: string, signal: Signal): void {
    const c = this.findContainer(ref);
    const rt = this.runtime(c.id);
    if (c.state.status !== 'running' || !rt.proc) throw conflict(`Cannot kill container: ${ref}: Container ${c.id} is not running`);
    if (signal === 'KILL') c.state.manuallyStopped = true;
    this.events.emit('container', 'kill', c.id, this.containerAttributes(c, { signal: signalNumber(signal) }));
    rt.proc.signal(signal);
  }

  async restart(ref: string, timeoutS: number | undefined): Promise<void> {
    const c = this.findContainer(ref);
    if (c.state.status === 'running' || c.state.status === 'restarting') await this.stopContainer(c, timeoutS);
    this.startAnew(c);
    this.events.emit('container', 'restart', c.id, this.containerAttributes(c));
  }

  remove(ref: string, opts: { force: boolean; volumes: boolean }): void {
    const c = this.findContainer(ref);
    const rt = this.runtime(c.id);
    if ((c.state.status === 'running' || c.state.status === 'restarting') && !opts.force) {
      throw conflict(`You cannot remove a running container ${c.id}. Stop the container before attempting removal or force remove`);
    }
    c.state.manuallyStopped = true;
    if (rt.restartTimer) clearTimeout(rt.restartTimer);
    rt.health?.stop();
    if (rt.proc) {
      this.events.emit('container', 'kill', c.id, this.containerAttributes(c, { signal: '9' }));
      rt.proc.signal('KILL');
    }
    this.containers.delete(c.id);
    this.runtimes.delete(c.id);
    rmSync(join(this.dataDir, 'containers', c.id), { recursive: true, force: true });
    if (opts.volumes) {
      // Only anonymous volumes go with their container (named ones stay, as in dockerd).
      for (const m of c.mounts) {
        if (m.Type !== 'volume' || !/^[0-9a-f]{64}$/.test(m.Name!)) continue;
        try {
          this.volumes.remove(m.Name!, true);
        } catch {
          // still mounted by another container: it stays
        }
      }
    }
    this.events.emit('container', 'destroy', c.id, this.containerAttributes(c));
    for (const w of rt.removeWaiters.splice(0)) w();
    void this.save();
  }

  /** `POST /containers/{id}/wait`: not-running (default), next-exit, removed. */
  wait(ref: string, condition: string): Promise<number> {
    const c = this.findContainer(ref);
    const rt = this.runtime(c.id);
    if (condition === 'removed') return new Promise((r) => rt.removeWaiters.push(() => r(c.state.exitCode)));
    const running = c.state.status === 'running' || c.state.status === 'restarting';
    if (condition !== 'next-exit' && !running) return Promise.resolve(c.state.exitCode);
    return new Promise((resolveWait) => {
      const waiter = (code: number, restarting: boolean) => {
        if (condition !== 'next-exit' && restarting) rt.exitWaiters.push(waiter);
        else resolveWait(code);
      };
      rt.exitWaiters.push(waiter);
      rt.removeWaiters.push(() => resolveWait(c.state.exitCode));
    });
  }

  /** Resolves when the container's current run ends (for log followers). */
  onNextExit(c: ContainerRecord, fn: () => void): () => void {
    const rt = this.runtime(c.id);
    let active = true;
    const waiter = () => {
      if (active) fn();
    };
    rt.exitWaiters.push(waiter);
    rt.removeWaiters.push(waiter);
    return () => {
      active = false;
    };
  }

  isRunning(c: ContainerRecord): boolean {
    return c.state.status === 'running';
  }

  counts() {
    const cs = [...this.containers.values()];
    return {
      containers: cs.length,
      running: cs.filter((c) => c.state.status === 'running' || c.state.status === 'restarting').length,
      stopped: cs.filter((c) => c.state.status !== 'running' && c.state.status !== 'restarting').length,
      images: this.images.size,
    };
  }

}

function mergeEnv(base: string[] | null, extra: string[] | null): string[] | null {
  if (!base?.length && !extra?.length) return extra;
  const byKey = new Map<string, string>();
  for (const e of [...(base ?? []), ...(extra ?? [])]) byKey.set(e.split('=')[0]!, e);
  return [...byKey.values()];
}

function signalNumber(s: Signal): string {
  return { TERM: '15', KILL: '9', INT: '2', HUP: '1', USR1: '10', USR2: '12', QUIT: '3' }[s];
}

