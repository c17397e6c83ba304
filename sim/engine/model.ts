/**
 * The records the simulated engine keeps (and persists), and small helpers that format them
 * the way dockerd does (ids, timestamps, the human "Up 3 seconds" status).
 */
import { createHash, randomBytes } from 'node:crypto';

export const ZERO_TIME = '0001-01-01T00:00:00Z';

/** A container's or image's `Healthcheck` (durations in ns; 0 or absent: the default). */
export interface HealthConfig {
  Test?: string[] | null;
  Interval?: number;
  Timeout?: number;
  StartPeriod?: number;
  Retries?: number;
}

export interface HealthRecord {
  Status: 'starting' | 'healthy' | 'unhealthy';
  FailingStreak: number;
  Log: Array<{ Start: string; End: string; ExitCode: number; Output: string }>;
}

export interface ImageConfig {
  Cmd: string[] | null;
  Entrypoint: string[] | null;
  Env: string[] | null;
  Labels: Record<string, string> | null;
  WorkingDir: string;
  /** The image's HEALTHCHECK, when it has one. */
  Healthcheck?: HealthConfig | null;
}

export interface ImageRecord {
  id: string;
  repoTags: string[];
  repoDigests: string[];
  created: string;
  size: number;
  layers: string[];
  config: ImageConfig;
}

export type RestartPolicyName = '' | 'no' | 'always' | 'unless-stopped' | 'on-failure';

export interface MountRecord {
  Type: 'volume' | 'bind';
  Name?: string;
  Source: string;
  Destination: string;
  Driver?: string;
  Mode: string;
  RW: boolean;
  Propagation: string;
}

export interface EndpointRecord {
  networkId: string;
  endpointId: string;
  aliases: string[] | null;
  ip: string;
  /** Of the network's subnet; absent in states saved before it was kept (all /16 then). */
  prefixLen?: number;
  gateway: string;
  mac: string;
}

export type ContainerStatus = 'created' | 'running' | 'restarting' | 'removing' | 'exited' | 'dead';

export interface ContainerStateRecord {
  status: ContainerStatus;
  pid: number;
  exitCode: number;
  error: string;
  startedAt: string;
  finishedAt: string;
  /** Stopped by a client (stop/kill): restart policies other than `always` do not apply. */
  manuallyStopped: boolean;
  /** Once it has run with a healthcheck. */
  health?: HealthRecord;
}

export interface ContainerRecord {
  id: string;
  name: string;
  created: string;
  imageId: string;
  imageRef: string;
  config: {
    Hostname: string;
    Env: string[] | null;
    Cmd: string[] | null;
    Entrypoint: string[] | null;
    Image: string;
    Labels: Record<string, string>;
    WorkingDir: string;
    Tty: boolean;
    User: string;
    StopSignal?: string;
    StopTimeout?: number;
    Healthcheck?: HealthConfig;
    /** `"80/tcp": {}` per port, as given. */
    ExposedPorts?: Record<string, Record<string, never>>;
  };
  hostConfig: Record<string, unknown> & {
    Binds: string[] | null;
    NetworkMode: string;
    RestartPolicy: { Name: RestartPolicyName; MaximumRetryCount: number };
  };
  mounts: MountRecord[];
  /** Network name to endpoint. */
  networks: Record<string, EndpointRecord>;
  state: ContainerStateRecord;
  restartCount: number;
}

export interface VolumeRecord {
  name: string;
  driver: string;
  labels: Record<string, string>;
  options: Record<string, string> | null;
  createdAt: string;
  mountpoint: string;
}

export interface NetworkRecord {
  id: string;
  name: string;
  driver: string;
  created: string;
  labels: Record<string, string>;
  internal: boolean;
  attachable: boolean;
  subnet: string;
  gateway: string;
  /**
   * The IPAM section as inspect shows it: dockerd lists what the create asked for (a subnet
   * given without a gateway shows none) and everything when it picked the subnet itself.
   * Absent in states saved before it was kept: subnet and gateway are shown.
   */
  ipam?: { config: Array<{ Subnet: string; Gateway?: string }>; options: Record<string, string> | null };
  options: Record<string, string>;
  /** Built in (bridge, host, none): cannot be removed. */
  predefined: boolean;
}

export const randomId = () => randomBytes(32).toString('hex');
export const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');
/**
 * The engine's wall clock in ms since the epoch: the host's, or set off from it for a device
 * whose clock is wrong (a fleet's clock-skew fault). Timers stay on the real clock, as a wrong
 * wall clock on a board leaves them.
 */
export type WallClock = () => number;
export const isoAt = (ms: number) => new Date(ms).toISOString();

/**
 * How much an engine keeps in memory: events for `since` queries (dockerd keeps about a
 * thousand) and log lines per container for `docker logs`. A fleet's thousands of engines keep
 * fewer: their supervisors read events as they come and never ask for the past.
 */
export interface EngineHistory {
  readonly events: number;
  readonly logLines: number;
}
export const DEFAULT_HISTORY: EngineHistory = { events: 1000, logLines: 5000 };

/** go-units HumanDuration, which dockerd uses for the Status column. */
export function humanDuration(ms: number): string {
  const seconds = Math.round(ms / 1000);
  if (seconds < 1) return 'Less than a second';
  if (seconds === 1) return '1 second';
  if (seconds < 60) return `${seconds} seconds`;
  const minutes = Math.round(ms / 60_000);
  if (minutes === 1) return 'About a minute';
  if (minutes < 60) return `${minutes} minutes`;
  const hours = Math.round(ms / 3_600_000);
  if (hours === 1) return 'About an hour';
  if (hours < 48) return `${hours} hours`;
  if (hours < 24 * 7 * 2) return `${Math.floor(hours / 24)} days`;
  if (hours < 24 * 30 * 2) return `${Math.floor(hours / 24 / 7)} weeks`;
  if (hours < 24 * 365 * 2) return `${Math.floor(hours / 24 / 30)} months`;
  return `${Math.floor(hours / 24 / 365)} years`;
}

/** The `Status` column of `docker ps`. */
export function statusText(s: ContainerStateRecord, now = Date.now()): string {
  switch (s.status) {
    case 'created':
      return 'Created';
    case 'running': {
      const up = `Up ${humanDuration(now - Date.parse(s.startedAt))}`;
      if (!s.health) return up;
      return `${up} (${s.health.Status === 'starting' ? 'health: starting' : s.health.Status})`;
    }
    case 'restarting':
      return `Restarting (${s.exitCode}) ${humanDuration(now - Date.parse(s.finishedAt))} ago`;
    case 'removing':
      return 'Removal In Progress';
    case 'dead':
      return 'Dead';
    case 'exited':
      return s.finishedAt === ZERO_TIME ? 'Exited' : `Exited (${s.exitCode}) ${humanDuration(now - Date.parse(s.finishedAt))} ago`;
  }
}

/** "busybox" -> "busybox:latest"; digests and ids stay as they are. */
export function normaliseRef(raw: string): string {
  // Docker Hub names are stored in their familiar form, as dockerd shows them.
  const ref = raw.replace(/^(docker\.io|index\.docker\.io)\//, '').replace(/^library\//, '');
  if (ref.startsWith('sha256:') || ref.includes('@')) return ref;
  const slash = ref.lastIndexOf('/');
  return ref.slice(slash + 1).includes(':') ? ref : `${ref}:latest`;
}

/** Splits "repo:tag" (a registry port is not a tag). */
export function splitRef(ref: string): { repo: string; tag: string } {
  const n = normaliseRef(ref);
  const colon = n.lastIndexOf(':');
  return { repo: n.slice(0, colon), tag: n.slice(colon + 1) };
}
