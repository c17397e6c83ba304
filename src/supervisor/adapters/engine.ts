/**
 * The container engine adapter: dockerode over the Engine API socket (dockerd, balenaEngine,
 * or sim/engine). Everything the supervisor creates carries labels naming the device, app,
 * service and release, so the current state is read back from the engine alone and several
 * devices can share one engine.
 */
import Docker from 'dockerode';
import type { Agent } from 'node:http';
import { parseBytes, parseDuration, type ContainerSettings } from '../../protocol/container-settings.js';
import type { Health } from '../../protocol/device-api.js';
import { LABEL } from '../../protocol/engine-labels.js';
import { PassThrough, type Readable } from 'node:stream';
import { FleetlabError, errorText } from '../../errors.js';
import { gatewayOf, matchesSettings, networkMembers, supervisorNetworkCreateOptions, supervisorNetworkDefaults, type SupervisorNetworkSettings } from '../supervisor-network.js';


/** Node's name for a CPU architecture as the platform names it (PLATFORM_DEVICE_ARCH). */
export const engineArch = (a: string): string => ({ arm64: 'aarch64', x64: 'amd64', arm: 'armv7hf', ia32: 'i386' })[a] ?? a;

/** The engine name of an app's volume or network on a device. */
export const deviceObjectName = (uuid: string, appId: number, name: string): string => `${uuid.slice(0, 7)}_${appId}_${name}`;

export type ContainerState = 'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';

/**
 * The health in a container list's `Status` ("Up 3 seconds (healthy)", "(health: starting)"):
 * Engine API 1.41 lists no health field, and inspecting every container on every read would
 * cost a request each.
 */
export function healthOfStatus(status: string): Health | undefined {
  const m = /\((healthy|unhealthy|health: starting)\)$/.exec(status);
  if (!m) return undefined;
  return m[1] === 'health: starting' ? 'starting' : (m[1] as Health);
}

export interface ManagedContainer {
  id: string;
  name: string;
  appId: number;
  serviceId: number;
  serviceName: string;
  imageId: number;
  releaseId: number;
  commit: string;
  configHash: string;
  state: ContainerState;
  /** Only while it runs with a healthcheck. */
  health?: Health;
  createdAt: string;
  image: string;
  engineImageId: string;
}

export interface ManagedVolume {
  name: string;
  appId: number;
  volume: string;
}

export interface ManagedNetwork {
  id: string;
  name: string;
  appId: number;
  network: string;
}

/** The supervisor network (supervisor-network.ts) as the engine has it. */
export interface SupervisorNetworkState {
  id: string;
  name: string;
  subnet: string;
  gateway: string;
  /** Made by this device's supervisor (its labels), so the supervisor may replace it. */
  ours: boolean;
  /** Where the API answers on it: the gateway, or the supervisor's container's address there (`supervisorContainer`). */
  apiHost: string;
  /** What the settings ask for, with the containers it must hold connected (networkMembers): services may join it. */
  usable: boolean;
}

export interface EngineSnapshot {
  containers: ManagedContainer[];
  volumes: ManagedVolume[];
  /** The apps' networks. */
  networks: ManagedNetwork[];
  /** Absent until it exists. */
  supervisorNetwork?: SupervisorNetworkState;
  /** Image references (repo:tag and ids) present in the engine, to engine image id. */
  images: Map<string, string>;
}

export interface ContainerSpec extends ContainerSettings {
  name: string;
  image: string;
  command?: string[];
  env: string[];
  labels: Record<string, string>;
  binds: string[];
  networkMode: string;
  /** Further app networks (engine names) the container joins before it starts, with the same aliases. */
  extraNetworks?: string[];
  /** Network to attach with the service name as alias (app networks only). */
  aliases: string[];
  /** The supervisor network, joined before the first start without aliases: names on it would clash across apps. */
  supervisorNetwork?: string;
  /** Host address every published port binds to (the `publishAddress` setting); absent: as `ports` say. */
  publishAddress?: string;
  restart: 'no' | 'always' | 'on-failure' | 'unless-stopped';
}

/** Nanoseconds of a duration the target state's schema has already checked. */
const nanoseconds = (d: string | undefined) => (d === undefined ? undefined : parseDuration(d));

/**
 * The Engine API's Config fields, HostConfig and ExposedPorts for a spec's container settings,
 * as docker compose maps each key (pkg/compose/create.go): durations in nanoseconds,
 * `stop_grace_period` as whole seconds (`StopTimeout`), `shm_size` in bytes; published ports
 * at `publishAddress` when given (portBindings).
 */
export function containerSettings(spec: ContainerSettings, publishAddress = ''): {
  config: Record<string, unknown>;
  hostConfig: Record<string, unknown>;
  exposedPorts?: Record<string, Record<string, never>>;
} {
  const config: Record<string, unknown> = {};
  if (spec.healthcheck) {
    const h = spec.healthcheck;
    config.Healthcheck = {
      ...(h.test ? { Test: h.test } : {}),
      ...(h.interval !== undefined ? { Interval: nanoseconds(h.interval) } : {}),
      ...(h.timeout !== undefined ? { Timeout: nanoseconds(h.timeout) } : {}),
      ...(h.startPeriod !== undefined ? { StartPeriod: nanoseconds(h.startPeriod) } : {}),
      ...(h.retries !== undefined ? { Retries: h.retries } : {}),
    };
  }
  if (spec.entrypoint) config.Entrypoint = spec.entrypoint;
  if (spec.user !== undefined) config.User = spec.user;
  if (spec.workingDir !== undefined) config.WorkingDir = spec.workingDir;
  if (spec.stopSignal !== undefined) config.StopSignal = spec.stopSignal;
  if (spec.stopGracePeriod !== undefined) config.StopTimeout = Math.trunc(nanoseconds(spec.stopGracePeriod)! / 1e9);
  if (spec.hostname !== undefined) config.Hostname = spec.hostname;

  const hostConfig: Record<string, unknown> = {};
  if (spec.privileged !== undefined) hostConfig.Privileged = spec.privileged;
  if (spec.capAdd) hostConfig.CapAdd = spec.capAdd;
  if (spec.capDrop) hostConfig.CapDrop = spec.capDrop;
  if (spec.devices) {
    hostConfig.Devices = spec.devices.map((d) => {
      const [host, container, permissions] = d.split(':') as [string, string | undefined, string | undefined];
      return { PathOnHost: host, PathInContainer: container ?? host, CgroupPermissions: permissions ?? 'rwm' };
    });
  }
  if (spec.tmpfs) {
    hostConfig.Tmpfs = Object.fromEntries(spec.tmpfs.map((t) => {
      const colon = t.indexOf(':');
      return colon < 0 ? [t, ''] : [t.slice(0, colon), t.slice(colon + 1)];
    }));
  }
  if (spec.init !== undefined) hostConfig.Init = spec.init;
  if (spec.readOnly !== undefined) hostConfig.ReadonlyRootfs = spec.readOnly;
  if (spec.sysctls) hostConfig.Sysctls = spec.sysctls;
  if (spec.ulimits) hostConfig.Ulimits = Object.entries(spec.ulimits).map(([name, l]) => ({ Name: name, Soft: l.soft, Hard: l.hard }));
  if (spec.extraHosts) hostConfig.ExtraHosts = spec.extraHosts;
  if (spec.shmSize !== undefined) hostConfig.ShmSize = parseBytes(spec.shmSize);
  if (!spec.ports) return { config, hostConfig };
  const bindings = portBindings(spec.ports, publishAddress);
  hostConfig.PortBindings = bindings;
  return { config, hostConfig, exposedPorts: Object.fromEntries(Object.keys(bindings).map((k) => [k, {}])) };
}

export type PortBindings = Record<string, Array<{ HostIp: string; HostPort: string }>>;

/**
 * The Engine API's PortBindings for compose port specs (`[host ip:]host port:container
 * port[/proto]`, as the target state's schema admits them). With `publishAddress`, every
 * binding gets it as HostIp: a compose file is written for a device that has its host's
 * addresses to itself, so its own host IP, 127.0.0.1 included, means "this device", and a
 * device sharing its engine with others (the sim and container targets) is reached at its
 * own address alone. Binding as written there would have two devices ask for the same port
 * on the same interfaces, and the second fail.
 */
export function portBindings(ports: readonly string[], publishAddress = ''): PortBindings {
  const bindings: PortBindings = {};
  for (const p of ports) {
    const [mapping, proto = 'tcp'] = p.split('/') as [string, string | undefined];
    const last = mapping.lastIndexOf(':');
    const containerPort = mapping.slice(last + 1);
    const hostPart = mapping.slice(0, last);
    const hostColon = hostPart.lastIndexOf(':');
    const hostIp = hostColon < 0 ? '' : hostPart.slice(0, hostColon).replace(/^\[|\]$/g, '');
    const hostPort = hostColon < 0 ? hostPart : hostPart.slice(hostColon + 1);
    (bindings[`${containerPort}/${proto}`] ??= []).push({ HostIp: publishAddress || hostIp, HostPort: hostPort });
  }
  return bindings;
}

export interface PullProgress {
  /** 0..100 */
  percent: number;
}

function engineError(action: string, err: unknown): FleetlabError {
  return new FleetlabError('SUP_ERR_ENGINE', `container engine: ${action} failed: ${errorText(err)}`, { cause: err });
}

const statusCode = (err: unknown) => (err as { statusCode?: number }).statusCode;

/** Adds `:latest` the way the engine does, so "busybox" and "busybox:latest" compare equal. */
export function normaliseImageRef(ref: string): string {
  if (ref.startsWith('sha256:') || ref.includes('@')) return ref;
  const lastSlash = ref.lastIndexOf('/');
  return ref.slice(lastSlash + 1).includes(':') ? ref : `${ref}:latest`;
}

export interface EngineOptions {
  socketPath: string;
  device: string;
  /** Carries the requests instead of a connection to `socketPath` (a simulated engine serving in-process). */
  agent?: Agent;
  /**
   * Keep the last snapshot while the engine's event stream reports nothing and this adapter
   * changed nothing, instead of four list calls per read (fleet simulation: thousands of
   * devices reading their state every report interval in one process).
   */
  snapshotFromEvents?: boolean;
  /** Default: supervisor0 on 10.114.104.0/25, as balena's. */
  supervisorNetwork?: SupervisorNetworkSettings;
}

const EVENTS_RETRY_MS = 1_000;

export class Engine {
  private readonly docker: Docker;
  /** Bumped by every event and every change made here: a snapshot read across a bump is not kept. */
  private generation = 0;
  private kept: { generation: number; snapshot: EngineSnapshot } | null = null;
  private events: Readable | null = null;
  private eventsRetry: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: EngineOptions) {
    this.docker = new Docker({ socketPath: options.socketPath, ...(options.agent ? { agent: options.agent } : {}) });
    if (options.snapshotFromEvents) void this.watchEvents();
  }

  /** Stops the event stream (only opened with `snapshotFromEvents`). */
  close(): void {
    this.closed = true;
    clearTimeout(this.eventsRetry);
    this.events?.destroy();
    this.events = null;
    this.kept = null;
  }

  /** Runs a change: a snapshot read while it runs, or kept from before it, is not kept after it. */
  private async changing<T>(change: () => Promise<T>): Promise<T> {
    this.changed();
    try {
      return await change();
    } finally {
      this.changed();
    }
  }

  private changed(): void {
    this.generation += 1;
    this.kept = null;
  }

  /** Keeps an event stream open; while it is down nothing is kept, so reads go to the engine. */
  private async watchEvents(): Promise<void> {
    if (this.closed) return;
    try {
      const stream = (await this.docker.getEvents()) as Readable;
      if (this.closed) return void stream.destroy();
      this.events = stream;
      // Whatever happened before the stream opened is in no kept snapshot: start afresh.
      this.changed();
      stream.on('data', () => this.changed());
      stream.on('error', () => undefined);
      stream.on('close', () => {
        if (this.events === stream) this.events = null;
        this.changed();
        if (!this.closed) this.eventsRetry = setTimeout(() => void this.watchEvents(), EVENTS_RETRY_MS).unref();
      });
    } catch {
      this.changed();
      if (!this.closed) this.eventsRetry = setTimeout(() => void this.watchEvents(), EVENTS_RETRY_MS).unref();
    }
  }

  get device(): string {
    return this.options.device;
  }

  async ping(): Promise<void> {
    try {
      await this.docker.ping();
    } catch (err) {
      throw engineError(`ping ${this.options.socketPath}`, err);
    }
  }

  private deviceFilter() {
    return { label: [`${LABEL.device}=${this.options.device}`] };
  }

  /** The device's containers, volumes and networks and the engine's images; callers must not change it. */
  async snapshot(): Promise<EngineSnapshot> {
    if (this.kept && this.kept.generation === this.generation && this.events) return this.kept.snapshot;
    const generation = this.generation;
    const snapshot = await this.readSnapshot();
    // `events` is open only with snapshotFromEvents.
    if (this.events && generation === this.generation) this.kept = { generation, snapshot };
    return snapshot;
  }

  private async readSnapshot(): Promise<EngineSnapshot> {
    try {
      const [containers, volumes, networks, images, named] = await Promise.all([
        this.docker.listContainers({ all: true, filters: this.deviceFilter() }),
        this.docker.listVolumes({ filters: this.deviceFilter() }),
        this.docker.listNetworks({ filters: this.deviceFilter() }),
        this.docker.listImages(),
        // By name, not label: one left by an earlier install, or by balena, is used when it fits.
        this.docker.listNetworks({ filters: { name: [this.supervisorNetworkSettings.name] } }),
      ]);
      const imageMap = new Map<string, string>();
      for (const image of images) {
        imageMap.set(image.Id, image.Id);
        for (const tag of image.RepoTags ?? []) imageMap.set(tag, image.Id);
        // Cloud releases name images by digest; such images often carry no tag.
        for (const digest of image.RepoDigests ?? []) imageMap.set(digest, image.Id);
      }
      return {
        // The apps' containers only: a device's own helpers carry its label too, so they go with
        // it (a simulated device's host-network container), and belong to no app.
        containers: containers.filter((c) => c.Labels[LABEL.appId] !== undefined).map((c) => {
          const l = c.Labels;
          return {
            id: c.Id,
            name: (c.Names[0] ?? '').replace(/^\//, ''),
            appId: Number(l[LABEL.appId]),
            serviceId: Number(l[LABEL.serviceId]),
            serviceName: l[LABEL.serviceName] ?? '',
            imageId: Number(l[LABEL.imageId]),
            releaseId: Number(l[LABEL.releaseId]),
            commit: l[LABEL.commit] ?? '',
            configHash: l[LABEL.configHash] ?? '',
            state: c.State as ContainerState,
            ...(c.State === 'running' && healthOfStatus(c.Status) ? { health: healthOfStatus(c.Status) } : {}),
            createdAt: new Date(c.Created * 1000).toISOString(),
            image: c.Image,
            engineImageId: c.ImageID,
          };
        }),
        volumes: (volumes.Volumes ?? []).map((v) => ({
          name: v.Name,
          appId: Number(v.Labels?.[LABEL.appId]),
          volume: v.Labels?.[LABEL.volume] ?? v.Name,
        })),
        networks: networks.filter((n) => !n.Labels?.[LABEL.supervisorNetwork]).map((n) => ({
          id: n.Id,
          name: n.Name,
          appId: Number(n.Labels?.[LABEL.appId]),
          network: n.Labels?.[LABEL.network] ?? n.Name,
        })),
        ...(await this.supervisorNetworkIn(named)),
        images: imageMap,
      };
    } catch (err) {
      throw engineError('reading the current state', err);
    }
  }

  /**
   * Pulls an image, reporting the percentage of bytes downloaded across its layers. The
   * engine reports per-layer `progressDetail`; layers whose size is not yet known count as 0.
   */
  async pull(image: string, onProgress: (p: PullProgress) => void): Promise<void> {
    return this.changing(async () => {
      let stream: Readable;
      try {
        stream = (await this.docker.pull(image)) as Readable;
      } catch (err) {
        throw engineError(`pulling ${image}`, err);
      }
      const layers = new Map<string, { current: number; total: number }>();
      await new Promise<void>((resolve, reject) => {
        this.docker.modem.followProgress(
          stream,
          (err: Error | null, output?: Array<{ error?: string }>) => ((err ?? output?.find((e) => e.error)?.error) ? reject(engineError(`pulling ${image}`, err ?? output!.find((e) => e.error)!.error)) : resolve()),
          (event: { id?: string; status?: string; error?: string; progressDetail?: { current?: number; total?: number } }) => {
            if (event.error) return;
            if (!event.id) return;
            const layer = layers.get(event.id) ?? { current: 0, total: 0 };
            if (event.status === 'Downloading' && event.progressDetail?.total) {
              layer.current = event.progressDetail.current ?? 0;
              layer.total = event.progressDetail.total;
            } else if (event.status === 'Download complete' || event.status === 'Pull complete' || event.status === 'Already exists') {
              layer.current = layer.total = Math.max(layer.total, 1);
            }
            layers.set(event.id, layer);
            let current = 0;
            let total = 0;
            for (const l of layers.values()) {
              current += l.current;
              total += l.total;
            }
            if (total > 0) onProgress({ percent: Math.min(100, Math.floor((current / total) * 100)) });
          },
        );
      });
    });
  }

  async createNetwork(appId: number, network: string): Promise<void> {
    return this.changing(async () => {
      try {
        await this.docker.createNetwork({
          Name: this.networkName(appId, network),
          Driver: 'bridge',
          CheckDuplicate: true,
          Labels: { [LABEL.supervised]: 'true', [LABEL.device]: this.options.device, [LABEL.appId]: String(appId), [LABEL.network]: network },
        });
      } catch (err) {
        if (statusCode(err) === 409) return;
        throw engineError(`creating network ${network} of app ${appId}`, err);
      }
    });
  }

  get supervisorNetworkSettings(): SupervisorNetworkSettings {
    return this.options.supervisorNetwork ?? supervisorNetworkDefaults;
  }

  private async supervisorNetworkIn(listed: Docker.NetworkInspectInfo[]): Promise<{ supervisorNetwork?: SupervisorNetworkState; missingMembers?: string[] }> {
    const settings = this.supervisorNetworkSettings;
    // The name filter matches parts of names.
    const n = listed.find((l) => l.Name === settings.name);
    if (!n) return {};
    const config = n.IPAM?.Config?.[0];
    const found = { subnet: config?.Subnet ?? '', gateway: gatewayOf(config) ?? '' };
    const fits = matchesSettings(settings, found);
    const members = networkMembers(settings);
    // A listing leaves out who is connected; only a device with members asks for it.
    const connected = fits && members.length ? await this.connectedTo(n.Id) : [];
    const addressOf = (ref: string) => connected.find((c) => c.name === ref || c.id.startsWith(ref))?.address;
    const missingMembers = members.filter((m) => !addressOf(m));
    const apiHost = settings.supervisorContainer ? (addressOf(settings.supervisorContainer) ?? '') : found.gateway;
    const usable = fits && missingMembers.length === 0 && apiHost !== '';
    return { supervisorNetwork: { id: n.Id, name: n.Name, ...found, ours: n.Labels?.[LABEL.device] === this.options.device, apiHost, usable }, missingMembers };
  }

  /** The containers on a network, with their IPv4 address there (without the prefix length). */
  private async connectedTo(networkId: string): Promise<Array<{ id: string; name: string; address: string }>> {
    const { Containers } = (await this.docker.getNetwork(networkId).inspect()) as { Containers?: Record<string, { Name?: string; IPv4Address?: string }> };
    return Object.entries(Containers ?? {}).map(([id, c]) => ({ id, name: c.Name ?? '', address: (c.IPv4Address ?? '').replace(/\/\d+$/, '') }));
  }

  /**
   * Makes the supervisor network as the settings say, and connects the containers it must hold
   * (networkMembers: the supervisor's own, the host-network one). One of this device's that
   * does not fit (the subnet setting changed) is replaced: its containers are disconnected
   * first, as the engine refuses to remove a network in use, and the planner replaces them, as
   * their address changed with it. Anyone else's is left alone and named in the error.
   */
  async createSupervisorNetwork(): Promise<void> {
    const settings = this.supervisorNetworkSettings;
    return this.changing(async () => {
      let id: string;
      try {
        const listed = await this.docker.listNetworks({ filters: { name: [settings.name] } });
        const { supervisorNetwork: existing, missingMembers } = await this.supervisorNetworkIn(listed);
        if (existing?.usable) return;
        const fits = existing !== undefined && matchesSettings(settings, existing);
        if (existing && !fits && !existing.ours) {
          throw new FleetlabError('SUP_ERR_ENGINE', `network ${settings.name} exists with subnet ${existing.subnet || 'none'} and is not this device's: remove it, or set supervisorNetwork or supervisorSubnet to fit`);
        }
        if (existing && fits) {
          await this.connectMembers(existing.id, missingMembers ?? []);
          return;
        }
        if (existing) {
          const network = this.docker.getNetwork(existing.id);
          const { Containers } = (await network.inspect()) as { Containers?: Record<string, unknown> };
          for (const cid of Object.keys(Containers ?? {})) await network.disconnect({ Container: cid, Force: true });
          await network.remove();
        }
        ({ id } = await this.docker.createNetwork({
          Name: settings.name,
          Driver: 'bridge',
          CheckDuplicate: true,
          Labels: { [LABEL.supervised]: 'true', [LABEL.device]: this.options.device, [LABEL.supervisorNetwork]: 'true' },
          ...supervisorNetworkCreateOptions(settings),
        }));
      } catch (err) {
        if (err instanceof FleetlabError) throw err;
        // Made meanwhile by another round: the next snapshot says whether it fits.
        if (statusCode(err) === 409) return;
        throw engineError(`creating the supervisor network ${settings.name}${settings.subnet ? ` on ${settings.subnet}` : ''}`, err);
      }
      await this.connectMembers(id, networkMembers(settings));
    });
  }

  private async connectMembers(networkId: string, members: readonly string[]): Promise<void> {
    for (const member of members) {
      try {
        await this.docker.getNetwork(networkId).connect({ Container: member, EndpointConfig: {} });
      } catch (err) {
        // Connected meanwhile (dockerd answers 403 "already exists in network", some engines 409).
        if (statusCode(err) === 403 || statusCode(err) === 409) continue;
        const setting = member === this.supervisorNetworkSettings.supervisorContainer ? 'supervisorContainer' : 'hostNetworkContainer';
        throw new FleetlabError('SUP_ERR_ENGINE', `container engine: connecting container ${member} (the ${setting} setting) to the supervisor network ${this.supervisorNetworkSettings.name} failed: ${errorText(err)}; start that container, or correct the setting`, { cause: err });
      }
    }
  }

  async removeNetwork(id: string): Promise<void> {
    return this.changing(async () => {
      try {
        await this.docker.getNetwork(id).remove();
      } catch (err) {
        if (statusCode(err) === 404) return;
        throw engineError(`removing network ${id}`, err);
      }
    });
  }

  async createVolume(appId: number, volume: string): Promise<void> {
    return this.changing(async () => {
      try {
        await this.docker.createVolume({
          Name: this.volumeName(appId, volume),
          Labels: { [LABEL.supervised]: 'true', [LABEL.device]: this.options.device, [LABEL.appId]: String(appId), [LABEL.volume]: volume },
        });
      } catch (err) {
        throw engineError(`creating volume ${volume} of app ${appId}`, err);
      }
    });
  }

  /** False when the volume is still in use (the engine answers 409). */
  async removeVolume(name: string): Promise<boolean> {
    return this.changing(async () => {
      try {
        await this.docker.getVolume(name).remove();
        return true;
      } catch (err) {
        if (statusCode(err) === 404) return true;
        if (statusCode(err) === 409) return false;
        throw engineError(`removing volume ${name}`, err);
      }
    });
  }

  networkName(appId: number, network: string): string {
    return deviceObjectName(this.options.device, appId, network);
  }

  volumeName(appId: number, volume: string): string {
    return deviceObjectName(this.options.device, appId, volume);
  }

  async createContainer(spec: ContainerSpec): Promise<string> {
    return this.changing(async () => {
      // `container:<id>` shares another container's namespace (the device's host network): no network of its own to join.
      const appNetwork = !['host', 'none', 'bridge'].includes(spec.networkMode) && !spec.networkMode.startsWith('container:');
      const settings = containerSettings(spec, spec.publishAddress);
      try {
        const container = await this.docker.createContainer({
          name: spec.name,
          Image: spec.image,
          ...(spec.command ? { Cmd: spec.command } : {}),
          ...settings.config,
          Env: spec.env,
          Labels: { ...spec.labels, [LABEL.supervised]: 'true', [LABEL.device]: this.options.device },
          ...(settings.exposedPorts ? { ExposedPorts: settings.exposedPorts } : {}),
          HostConfig: {
            Binds: spec.binds,
            NetworkMode: spec.networkMode,
            RestartPolicy: { Name: spec.restart === 'no' ? '' : spec.restart },
            ...settings.hostConfig,
          },
          ...(appNetwork
            ? { NetworkingConfig: { EndpointsConfig: { [spec.networkMode]: { Aliases: spec.aliases } } } }
            : {}),
        });
        await this.joinExtraNetworks(container.id, spec);
        return container.id;
      } catch (err) {
        throw engineError(`creating container ${spec.name}`, err);
      }
    });
  }

  /**
   * Engine API 1.41 (Debian's docker.io) takes one network at create; the rest are joined
   * before the first start. A container that could not join them all is removed, so the next
   * round creates it whole rather than finding a half-connected one with the right hash.
   */
  private async joinExtraNetworks(id: string, spec: ContainerSpec): Promise<void> {
    try {
      for (const network of spec.extraNetworks ?? []) {
        await this.docker.getNetwork(network).connect({ Container: id, EndpointConfig: { Aliases: spec.aliases } });
      }
      if (spec.supervisorNetwork) await this.docker.getNetwork(spec.supervisorNetwork).connect({ Container: id, EndpointConfig: {} });
    } catch (err) {
      await this.docker.getContainer(id).remove({ force: true }).catch(() => undefined);
      throw err;
    }
  }

  async start(id: string): Promise<void> {
    return this.changing(async () => {
      try {
        await this.docker.getContainer(id).start();
      } catch (err) {
        if (statusCode(err) === 304) return;
        throw engineError(`starting container ${id.slice(0, 12)}`, err);
      }
    });
  }

  /** Stops with the container's own stop signal and grace period (compose's `stop_signal`, `stop_grace_period`; 10 s unless set). */
  async stop(id: string): Promise<void> {
    return this.changing(async () => {
      try {
        await this.docker.getContainer(id).stop();
      } catch (err) {
        if (statusCode(err) === 304 || statusCode(err) === 404) return;
        throw engineError(`stopping container ${id.slice(0, 12)}`, err);
      }
    });
  }

  async remove(id: string): Promise<void> {
    return this.changing(async () => {
      try {
        await this.docker.getContainer(id).remove({ force: true, v: false });
      } catch (err) {
        if (statusCode(err) === 404) return;
        throw engineError(`removing container ${id.slice(0, 12)}`, err);
      }
    });
  }

  /** Follows a container's output (stdout and stderr, with timestamps) as one stream. */
  async logs(id: string, options: { follow: true; since?: number }): Promise<Readable> {
    try {
      const raw = (await this.docker.getContainer(id).logs({
        follow: true,
        stdout: true,
        stderr: true,
        timestamps: true,
        ...(options.since !== undefined ? { since: options.since } : {}),
      })) as unknown as Readable;
      const out = new PassThrough();
      this.docker.modem.demuxStream(raw, out, out);
      raw.on('end', () => out.end());
      raw.on('error', (e: Error) => out.destroy(e));
      out.on('close', () => raw.destroy());
      return out;
    } catch (err) {
      throw engineError(`reading logs of ${id.slice(0, 12)}`, err);
    }
  }
}
