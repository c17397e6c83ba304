/**
 * How a captured device becomes a replayed one (`fleetlab replay`), planned from the bundle
 * alone. Pure: replay.ts carries the plan out in an engine and a data dir.
 *
 * The replayed device keeps the captured uuid (its engine is its own), so its containers,
 * volumes and networks keep their captured names and labels. What it cannot share with the
 * original: its keys (a bundle holds none, so it gets new ones), its lock root and its API
 * address. Containers get the replay's values for those. A container that was what the target
 * asked for stays so: it gets the replay supervisor's config hash for that service, so the
 * replay does not replace what the original would have left alone, and one that was not keeps
 * its captured hash, so the replay replaces it as the original would have.
 */
import { posix } from 'node:path';
import type { DeviceRecord } from '../../src/supervisor/state/store.js';
import type { LockRecord } from '../../src/supervisor/state/locks.js';
import type { TargetState } from '../../src/protocol/target-state.js';
import { deviceEnvironment, desiredContainer, type SpecContext } from '../../src/supervisor/state/container-spec.js';
import { LABEL } from '../../src/protocol/engine-labels.js';
import { deviceObjectName, normaliseImageRef } from '../../src/supervisor/adapters/engine.js';
import { errorText } from '../../src/errors.js';
import type { ProxySettings } from '../../src/supervisor/adapters/ports.js';
import { formatNoProxy, formatRedsocksConf } from '../../src/supervisor/adapters/redsocks-conf.js';
import { REDACTED } from './redact.js';
import type { CapturedLocks } from './capture.js';

/** What `docker inspect` shows of a container, as far as a replay uses it. */
export interface InspectedContainer {
  Name: string;
  Config: {
    Image: string;
    Cmd?: string[] | null;
    Entrypoint?: string[] | null;
    Env?: string[] | null;
    Labels?: Record<string, string> | null;
    WorkingDir?: string;
  };
  HostConfig: {
    Binds?: string[] | null;
    NetworkMode?: string;
    RestartPolicy?: { Name: string; MaximumRetryCount?: number };
    Privileged?: boolean;
    CapAdd?: string[] | null;
    CapDrop?: string[] | null;
    ExtraHosts?: string[] | null;
  };
  State: { Status: string; Running: boolean; Restarting: boolean; ExitCode: number };
  NetworkSettings?: { Networks?: Record<string, { Aliases?: string[] | null }> | null };
}

export interface InspectedImage {
  Id: string;
  RepoTags?: string[] | null;
  Config?: { Cmd?: string[] | null; Entrypoint?: string[] | null; Env?: string[] | null; Labels?: Record<string, string> | null; WorkingDir?: string } | null;
}

export interface InspectedVolume {
  Name: string;
  Driver?: string;
  Labels?: Record<string, string> | null;
}

export interface InspectedNetwork {
  Name: string;
  Driver?: string;
  Internal?: boolean;
  Labels?: Record<string, string> | null;
}

/** The parts of a bundle a replay starts from. */
export interface CapturedDevice {
  store: DeviceRecord;
  locks: CapturedLocks;
  containers: InspectedContainer[];
  images: { present: InspectedImage[]; missing: string[] };
  volumes: InspectedVolume[];
  networks: InspectedNetwork[];
  /** The contents of the volumes the capture read (`--volumes`), by name; and why others were not. */
  volumeData?: { archives: Map<string, Buffer>; skipped: Array<{ name: string; why: string }> };
  /** `GET /v1/device/host-config` as captured (the API never shows the proxy's password). */
  hostConfig?: CapturedHostConfig;
  /** How far the device's clock was off the capturing host's (`host/clock.json`). */
  clock?: { offsetMs: number; roundTripMs: number };
}

export interface CapturedHostConfig {
  network?: { hostname?: string; proxy?: { type: string; ip: string; port: string | number; login?: string; noProxy?: string[] } };
}

/** What is the replay's own, not the captured device's. */
export interface ReplayContext {
  lockRoot: string;
  /** The replayed supervisor's API, as its services are told it. */
  supervisorAddress: string;
  supervisorPort: number;
  arch: string;
  newKey: () => string;
}

export interface StandInImage {
  /** The captured tags; the first is the one it is imported as. */
  tags: string[];
  /** Dockerfile-style instructions (`CMD [...]`, `LABEL k=v`...) that give it the captured config. */
  changes: string[];
}

export interface ReplayContainer {
  /** The Engine API's create body, with `name`. */
  create: {
    name: string;
    Image: string;
    Cmd?: string[];
    Entrypoint?: string[];
    Env: string[];
    Labels: Record<string, string>;
    WorkingDir?: string;
    HostConfig: Record<string, unknown>;
    NetworkingConfig?: { EndpointsConfig: Record<string, { Aliases?: string[] }> };
  };
  /** Networks joined after create (the engine takes one at create). */
  alsoJoins: Array<{ network: string; aliases?: string[] }>;
  /** As captured: running (or restarting), exited, or never started. */
  state: 'running' | 'exited' | 'created';
}

export interface ReplayPlan {
  vendor: string;
  deviceType: string;
  store: DeviceRecord;
  images: StandInImage[];
  volumes: InspectedVolume[];
  /** tar.gz archives to unpack into volumes of these names, once created. */
  volumeArchives: Map<string, Buffer>;
  networks: InspectedNetwork[];
  containers: ReplayContainer[];
  /** Lock files to create: absolute paths under the replay's lock root. */
  locks: Array<{ file: string; content: string }>;
  /** The replayed device's wall clock this far off (ms), as the captured one was; absent: on time. */
  clockOffsetMs?: number;
  /** The host's name and proxy files as the device had them; written before the supervisor starts. */
  host: { hostname?: string; redsocksConf?: string; noProxy?: string };
  /** What the replay cannot make as it was; the command prints these. */
  notes: string[];
}

const DEFAULT_VENDOR = 'platform';
const DEFAULT_DEVICE_TYPE = 'raspberrypi3';

export function planReplay(captured: CapturedDevice, ctx: ReplayContext): ReplayPlan {
  const { store } = captured;
  const notes: string[] = [];
  const vendor = capturedVendor(captured);
  const V = vendor.toUpperCase();
  const deviceType = envValue(captured.containers, `${V}_DEVICE_TYPE`) ?? DEFAULT_DEVICE_TYPE;
  const rebase = (path: string) => rebased(path, captured.locks.root, ctx.lockRoot);

  const appKeys = Object.fromEntries(Object.keys(store.appKeys ?? {}).map((appId) => [appId, ctx.newKey()]));
  const replayStore: DeviceRecord = {
    ...store,
    deviceKey: ctx.newKey(),
    appKeys,
    cloudKey: store.cloudKey === REDACTED ? '' : store.cloudKey,
    // The dead supervisor's records move with its lock files, so the replayed one frees them at start as it would have.
    supervisorLocks: (store.supervisorLocks ?? []).map((r: LockRecord) => ({ ...r, file: rebase(r.file) })),
  };

  const spec: SpecContext = {
    vendor,
    uuid: store.uuid,
    deviceName: store.deviceName,
    deviceType,
    arch: ctx.arch,
    supervisorAddress: ctx.supervisorAddress,
    supervisorPort: ctx.supervisorPort,
    appKey: (appId) => appKeys[String(appId)] ?? '',
    lockDir: (appId, service) => posix.join(ctx.lockRoot, String(appId), service),
    networkName: (appId, n) => deviceObjectName(store.uuid, appId, n),
    volumeName: (appId, v) => deviceObjectName(store.uuid, appId, v),
  };
  const target = effectiveTarget(store);
  const imageEnv = new Map<string, string[]>();
  for (const image of captured.images.present) for (const tag of image.RepoTags ?? []) imageEnv.set(normaliseImageRef(tag), image.Config?.Env ?? []);

  let redactedLeft = 0;
  const containers = captured.containers.map((c): ReplayContainer => {
    const labels = { ...(c.Config.Labels ?? {}) };
    const appId = Number(labels[LABEL.appId]);
    const withApi = (c.Config.Env ?? []).some((e) => e.startsWith(`${V}_SUPERVISOR_API_KEY=`));
    const ours = deviceEnvironment(appId, spec, withApi ? ctx.supervisorAddress : undefined);
    let env = (c.Config.Env ?? []).map((entry) => {
      const name = entry.slice(0, entry.indexOf('='));
      return name in ours ? `${name}=${ours[name]}` : entry;
    });
    const binds = (c.HostConfig.Binds ?? []).map((bind) => {
      const [source, ...rest] = bind.split(':');
      return [rebase(source!), ...rest].join(':');
    });
    const service = target?.apps.find((a) => a.appId === appId)?.services.find((s) => s.serviceName === labels[LABEL.serviceName]);
    if (service) {
      const app = target!.apps.find((a) => a.appId === appId)!;
      const desired = desiredContainer(app, service, spec);
      if (sameService({ image: c.Config.Image, cmd: c.Config.Cmd, env, labels, binds, networkMode: c.HostConfig.NetworkMode, restart: c.HostConfig.RestartPolicy?.Name }, desired.spec, imageEnv.get(normaliseImageRef(c.Config.Image)) ?? [])) {
        labels[LABEL.configHash] = desired.configHash;
        // What was redacted is what the target says: the container was made from it.
        env = env.map((entry) => (entry.endsWith(`=${REDACTED}`) ? (desired.spec.env.find((d) => d.startsWith(entry.slice(0, entry.indexOf('=') + 1))) ?? entry) : entry));
      }
    }
    redactedLeft += env.filter((e) => e.endsWith(`=${REDACTED}`)).length;
    const networks = Object.entries(c.NetworkSettings?.Networks ?? {});
    const primary = c.HostConfig.NetworkMode ?? '';
    const primaryEndpoint = networks.find(([name]) => name === primary)?.[1];
    return {
      create: {
        name: c.Name.replace(/^\//, ''),
        Image: c.Config.Image,
        ...(c.Config.Cmd ? { Cmd: c.Config.Cmd } : {}),
        ...(c.Config.Entrypoint ? { Entrypoint: c.Config.Entrypoint } : {}),
        Env: env,
        Labels: labels,
        ...(c.Config.WorkingDir ? { WorkingDir: c.Config.WorkingDir } : {}),
        HostConfig: {
          Binds: binds,
          ...(primary ? { NetworkMode: primary } : {}),
          RestartPolicy: c.HostConfig.RestartPolicy ?? { Name: '' },
          ...(c.HostConfig.Privileged ? { Privileged: true } : {}),
          ...(c.HostConfig.CapAdd?.length ? { CapAdd: c.HostConfig.CapAdd } : {}),
          ...(c.HostConfig.CapDrop?.length ? { CapDrop: c.HostConfig.CapDrop } : {}),
          ...(c.HostConfig.ExtraHosts?.length ? { ExtraHosts: c.HostConfig.ExtraHosts } : {}),
        },
        ...(primaryEndpoint ? { NetworkingConfig: { EndpointsConfig: { [primary]: primaryEndpoint.Aliases?.length ? { Aliases: primaryEndpoint.Aliases } : {} } } } : {}),
      },
      alsoJoins: networks.filter(([name]) => name !== primary).map(([network, endpoint]) => ({ network, ...(endpoint.Aliases?.length ? { aliases: endpoint.Aliases } : {}) })),
      state: c.State.Running || c.State.Restarting ? 'running' : c.State.Status === 'created' ? 'created' : 'exited',
    };
  });
  if (redactedLeft > 0) notes.push(`${redactedLeft} environment values were redacted in the bundle and are "${REDACTED}" in the replayed containers`);

  const images = captured.images.present.filter((i) => (i.RepoTags ?? []).length > 0).map((i): StandInImage => ({ tags: i.RepoTags!, changes: imageChanges(i) }));
  const untagged = captured.images.present.filter((i) => !(i.RepoTags ?? []).length);
  if (untagged.length) notes.push(`untagged images not replayed (a container on one runs its tag's stand-in): ${untagged.map((i) => i.Id.slice(0, 19)).join(', ')}`);
  if (captured.images.missing.length) notes.push(`images the device did not have, not there either: ${captured.images.missing.join(', ')}`);
  const volumeArchives = captured.volumeData?.archives ?? new Map<string, Buffer>();
  const empty = captured.volumes.filter((v) => !volumeArchives.has(v.Name));
  if (empty.length) {
    const why = captured.volumeData ? captured.volumeData.skipped.map((s) => `${s.name}: ${s.why}`).join('; ') : 'the capture took no volume contents (--volumes)';
    notes.push(`volumes created empty: ${empty.map((v) => v.Name).join(', ')} (${why || 'none captured'})`);
  }
  const exited = containers.filter((c) => c.state === 'exited');
  if (exited.length) notes.push(`containers started and stopped to stand for exited ones (their exit codes are not the captured ones): ${exited.map((c) => c.create.name).join(', ')}`);

  const locks = captured.locks.files.map((f) => ({ file: posix.join(ctx.lockRoot, f.path), content: f.content }));
  const clockOffsetMs = clockOffset(captured.clock, notes);
  return { vendor, deviceType, store: replayStore, images, volumes: captured.volumes, volumeArchives, networks: captured.networks, containers, locks, host: hostFiles(captured.hostConfig, notes), ...(clockOffsetMs ? { clockOffsetMs } : {}), notes };
}

/** Below this, an offset is the reading's own error (its round trip), not the device's clock. */
const CLOCK_SLACK_MS = 1000;

/** The captured clock offset to replay; none when it is within the reading's error or was not read. */
function clockOffset(clock: CapturedDevice['clock'], notes: string[]): number | undefined {
  if (!clock) {
    notes.push("the device's clock was not read against the capturing host's (a bundle older than host/clock.json): the replay runs on time");
    return undefined;
  }
  if (Math.abs(clock.offsetMs) < Math.max(CLOCK_SLACK_MS, clock.roundTripMs)) return undefined;
  notes.push(`the device's clock was ${Math.abs(clock.offsetMs)} ms ${clock.offsetMs > 0 ? 'ahead of' : 'behind'} the capturing host's: the replayed supervisor's is too`);
  return clock.offsetMs;
}

/** The hostname and the proxy files (as the supervisor writes them) of a captured host config. */
function hostFiles(config: CapturedHostConfig | undefined, notes: string[]): ReplayPlan['host'] {
  const network = config?.network;
  if (!network) {
    notes.push('the host config was not captured: the replay keeps its own hostname and no proxy');
    return {};
  }
  const host: ReplayPlan['host'] = network.hostname ? { hostname: network.hostname } : {};
  const proxy = network.proxy;
  if (!proxy) return host;
  try {
    const settings = { type: proxy.type as ProxySettings['type'], ip: proxy.ip, port: Number(proxy.port), ...(proxy.login ? { login: proxy.login } : {}), ...(proxy.noProxy ? { noProxy: proxy.noProxy } : {}) };
    host.redsocksConf = formatRedsocksConf(settings);
    const noProxy = formatNoProxy(settings.noProxy);
    if (noProxy) host.noProxy = noProxy;
    if (settings.login) notes.push("the proxy's password is in no capture (the API never shows it): the replayed proxy has its login and no password");
  } catch (err) {
    notes.push(`the captured proxy is not replayed: ${errorText(err)}`);
  }
  return host;
}

/** The target the supervisor applies: the local one in local mode, else the cloud's. */
function effectiveTarget(store: DeviceRecord): TargetState | null {
  return store.localMode ? store.localTarget : (store.cloudTarget ?? store.localTarget);
}

/** The vendor word, from where its lock directory is mounted in a container (`/tmp/<vendor>`). */
function capturedVendor(captured: CapturedDevice): string {
  for (const c of captured.containers) {
    for (const bind of c.HostConfig.Binds ?? []) {
      const [source, dest] = bind.split(':');
      if (source?.startsWith(`${captured.locks.root.replace(/\/+$/, '')}/`) && dest?.startsWith('/tmp/')) return dest.slice('/tmp/'.length);
    }
  }
  return DEFAULT_VENDOR;
}

function envValue(containers: InspectedContainer[], name: string): string | undefined {
  for (const c of containers) {
    const entry = (c.Config.Env ?? []).find((e) => e.startsWith(`${name}=`));
    if (entry) return entry.slice(name.length + 1);
  }
  return undefined;
}

function rebased(path: string, from: string, to: string): string {
  const root = from.replace(/\/+$/, '');
  if (path === root) return to;
  return path.startsWith(`${root}/`) ? posix.join(to, path.slice(root.length + 1)) : path;
}

/**
 * Whether a captured container is what the desired one would be, as far as inspect shows: the
 * image, the supervisor's labels and the service's, the environment (values the bundle
 * redacted count as equal; extra variables may come from the image), the command when the
 * service sets one, the mounts, the network mode and the restart policy. Host settings
 * (devices, capabilities, ports...) are not compared.
 */
function sameService(
  c: { image: string; cmd?: string[] | null; env: string[]; labels: Record<string, string>; binds: string[]; networkMode?: string; restart?: string },
  desired: ReturnType<typeof desiredContainer>['spec'],
  imageEnv: string[],
): boolean {
  if (normaliseImageRef(c.image) !== normaliseImageRef(desired.image)) return false;
  for (const [k, v] of Object.entries(desired.labels)) if (k !== LABEL.configHash && c.labels[k] !== v) return false;
  const have = new Map(c.env.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
  const want = new Map(desired.env.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
  for (const [k, v] of want) if (have.get(k) !== v && have.get(k) !== REDACTED) return false;
  const fromImage = new Set(imageEnv.map((e) => e.slice(0, e.indexOf('='))));
  for (const k of have.keys()) if (!want.has(k) && !fromImage.has(k)) return false;
  if (desired.command && JSON.stringify(desired.command) !== JSON.stringify(c.cmd)) return false;
  if (JSON.stringify([...c.binds].sort()) !== JSON.stringify([...desired.binds].sort())) return false;
  if ((c.networkMode ?? '') !== desired.networkMode) return false;
  return (c.restart ?? '') === (desired.restart === 'no' ? '' : desired.restart);
}

/** The captured image's config as import changes. */
function imageChanges(image: InspectedImage): string[] {
  const config = image.Config ?? {};
  return [
    ...(config.Cmd ? [`CMD ${JSON.stringify(config.Cmd)}`] : []),
    ...(config.Entrypoint ? [`ENTRYPOINT ${JSON.stringify(config.Entrypoint)}`] : []),
    ...(config.WorkingDir ? [`WORKDIR ${config.WorkingDir}`] : []),
    ...(config.Env ?? []).map((e) => `ENV ${quoted(e.slice(0, e.indexOf('=')))}=${quoted(e.slice(e.indexOf('=') + 1))}`),
    ...Object.entries(config.Labels ?? {}).map(([k, v]) => `LABEL ${quoted(k)}=${quoted(v)}`),
  ];
}

/** A Dockerfile double-quoted word: the engine expands no variable in it and keeps blanks. */
const quoted = (word: string) => `"${word.replace(/["\\$]/g, '\\$&')}"`;
