/**
 * A service's compose-style container settings as the target state carries them (compose's
 * names and notations on the wire: `cap_add`, `stop_grace_period: 1m30s`, `shm_size: 64m`),
 * the camel-cased form the supervisor works on, and the parsers for compose's duration and
 * byte-size notations, which the compose reader and the supervisor share. Pure.
 */
import { Type, type Static } from '@sinclair/typebox';

/**
 * Compose's duration notation (Go's, as compose-go reads it): `10s`, `1m30s`, `500ms`, `1.5h`.
 * The micro sign is written as an escape here and below: the device bundle must stay ASCII
 * (device-image/payload.ts, nonAsciiInBundle).
 */
const DURATION = '^(0|([0-9]+(\\.[0-9]+)?(ns|us|\u00b5s|ms|s|m|h))+)$';
/** Compose's byte sizes (go-units' RAMInBytes): `67108864`, `64m`, `64MB`, `1.5GiB`. */
const BYTES = '^[0-9]+(\\.[0-9]+)? ?([kKmMgGtTpP])?[iI]?[bB]?$';

/** The resources `ulimits` may name (setrlimit's, as dockerd's go-units knows them). */
export const ULIMIT_NAMES = ['core', 'cpu', 'data', 'fsize', 'locks', 'memlock', 'msgqueue', 'nice', 'nofile', 'nproc', 'rss', 'rtprio', 'rttime', 'sigpending', 'stack'] as const;

const Duration = Type.String({ pattern: DURATION, description: 'a compose duration such as 10s, 1m30s or 500ms' });
const Limit = Type.Integer({ minimum: -1 });

const WireHealthcheck = Type.Object(
  {
    /** `["NONE"]`, `["CMD", arg...]` or `["CMD-SHELL", command]`; absent: the image's test. */
    test: Type.Optional(Type.Array(Type.String(), { minItems: 1 })),
    interval: Type.Optional(Duration),
    timeout: Type.Optional(Duration),
    start_period: Type.Optional(Duration),
    retries: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  { additionalProperties: false },
);

/** The wire schema of each setting, under compose's name; spread into the service's schema. */
export const containerSettingsSchema = {
  privileged: Type.Optional(Type.Boolean()),
  cap_add: Type.Optional(Type.Array(Type.String({ pattern: '^[A-Z_]+$' }))),
  cap_drop: Type.Optional(Type.Array(Type.String({ pattern: '^[A-Z_]+$' }))),
  /** `/dev/host[:/dev/container[:rwm]]` */
  devices: Type.Optional(Type.Array(Type.String({ pattern: '^/dev/[^:\\s]*(:/dev/[^:\\s]*)?(:[rwm]{1,3})?$' }))),
  /** `/path[:options]`, a tmpfs mounted in the container */
  tmpfs: Type.Optional(Type.Array(Type.String({ pattern: '^/[^:\\s]*(:[^\\s]+)?$' }))),
  /** `[ip:]hostPort:containerPort[/tcp|/udp]` */
  ports: Type.Optional(Type.Array(Type.String({ pattern: '^(([0-9.]+|\\[[0-9a-fA-F:]+\\]):)?[0-9]{1,5}:[0-9]{1,5}(/(tcp|udp))?$' }))),
  init: Type.Optional(Type.Boolean()),
  read_only: Type.Optional(Type.Boolean()),
  sysctls: Type.Optional(Type.Record(Type.String({ pattern: '^[a-zA-Z0-9_][a-zA-Z0-9_./-]*$' }), Type.String())),
  /** A limit for both, or `{soft, hard}`; -1 is unlimited. */
  ulimits: Type.Optional(
    Type.Record(
      Type.String({ pattern: `^(${ULIMIT_NAMES.join('|')})$` }),
      Type.Union([Limit, Type.Object({ soft: Limit, hard: Limit }, { additionalProperties: false })]),
      { additionalProperties: false },
    ),
  ),
  /** `host:ip` (the Engine's form) or `host=ip` (compose's, clearer for IPv6). */
  extra_hosts: Type.Optional(Type.Array(Type.String({ pattern: '^[^:=\\s]+[:=][^\\s]+$' }))),
  hostname: Type.Optional(Type.String({ pattern: '^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$', maxLength: 63 })),
  /** Bytes, or a size such as `64m`. */
  shm_size: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.String({ pattern: BYTES })])),
  healthcheck: Type.Optional(WireHealthcheck),
  /** Replaces the image's entrypoint; `[]` runs the command without one. */
  entrypoint: Type.Optional(Type.Array(Type.String())),
  /** `user[:group]`, names or ids. */
  user: Type.Optional(Type.String({ pattern: '^[^\\s:]+(:[^\\s:]+)?$' })),
  working_dir: Type.Optional(Type.String({ pattern: '^/', description: 'an absolute path in the container' })),
  stop_signal: Type.Optional(Type.String({ pattern: '^((SIG)?[A-Z][A-Z0-9]*([+-][0-9]+)?|[0-9]+)$' })),
  stop_grace_period: Type.Optional(Duration),
};

/** The settings' compose names, in the order the wire lists them. */
export const CONTAINER_SETTING_KEYS = Object.keys(containerSettingsSchema) as Array<keyof typeof containerSettingsSchema>;

export type WireContainerSettings = { [K in keyof typeof containerSettingsSchema]?: Static<(typeof containerSettingsSchema)[K]> };

export interface Healthcheck {
  test?: string[];
  interval?: string;
  timeout?: string;
  startPeriod?: string;
  retries?: number;
}

export interface Ulimit {
  soft: number;
  hard: number;
}

/** A service's container settings, compose's `privileged`, `healthcheck`, ...; each absent when not set. */
export interface ContainerSettings {
  privileged?: boolean;
  capAdd?: string[];
  capDrop?: string[];
  devices?: string[];
  tmpfs?: string[];
  ports?: string[];
  init?: boolean;
  readOnly?: boolean;
  sysctls?: Record<string, string>;
  ulimits?: Record<string, Ulimit>;
  /** `host:ip`, as the Engine takes them. */
  extraHosts?: string[];
  hostname?: string;
  /** Bytes, or a size such as `64m`. */
  shmSize?: number | string;
  healthcheck?: Healthcheck;
  entrypoint?: string[];
  user?: string;
  workingDir?: string;
  stopSignal?: string;
  stopGracePeriod?: string;
}

/** Each setting's wire (compose) name and its name here, in the order the config hash has always listed them. */
const NAMES = [
  ['privileged', 'privileged'], ['cap_add', 'capAdd'], ['cap_drop', 'capDrop'], ['devices', 'devices'], ['tmpfs', 'tmpfs'], ['ports', 'ports'],
  ['init', 'init'], ['read_only', 'readOnly'], ['sysctls', 'sysctls'], ['ulimits', 'ulimits'], ['extra_hosts', 'extraHosts'], ['hostname', 'hostname'],
  ['shm_size', 'shmSize'], ['healthcheck', 'healthcheck'], ['entrypoint', 'entrypoint'], ['user', 'user'], ['working_dir', 'workingDir'],
  ['stop_signal', 'stopSignal'], ['stop_grace_period', 'stopGracePeriod'],
] as const;
const HEALTHCHECK_NAMES = [['test', 'test'], ['interval', 'interval'], ['timeout', 'timeout'], ['start_period', 'startPeriod'], ['retries', 'retries']] as const;

/**
 * The keys that are set, renamed from one side of `names` to the other. An empty list or map
 * counts as not set, but for `entrypoint`, whose `[]` runs the command without the image's.
 */
function renamed(from: object, names: ReadonlyArray<readonly [string, string]>, to: 'wire' | 'here'): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [wire, here] of names) {
    const value = (from as Record<string, unknown>)[to === 'here' ? wire : here];
    const empty = Array.isArray(value) ? value.length === 0 : typeof value === 'object' && value !== null && Object.keys(value).length === 0;
    if (value === undefined || (empty && wire !== 'entrypoint')) continue;
    out[to === 'here' ? here : wire] = value;
  }
  return out;
}

/** `host=ip` or `host:ip` as the Engine's `host:ip` (the first separator splits, as compose-go does). */
export function engineExtraHost(entry: string): string {
  const at = entry.search(/[=:]/);
  return `${entry.slice(0, at)}:${entry.slice(at + 1).replace(/^\[(.*)\]$/, '$1')}`;
}

/** The settings that are set, from the wire's names; a single ulimit becomes soft = hard, extra hosts the Engine's form. */
export function containerSettingsFromWire(w: WireContainerSettings): ContainerSettings {
  const s = renamed(w, NAMES, 'here') as ContainerSettings & { ulimits?: WireContainerSettings['ulimits'] };
  if (s.ulimits) s.ulimits = Object.fromEntries(Object.entries(s.ulimits).map(([name, l]) => [name, typeof l === 'number' ? { soft: l, hard: l } : { soft: l.soft, hard: l.hard }]));
  if (s.extraHosts) s.extraHosts = s.extraHosts.map(engineExtraHost);
  if (s.healthcheck) s.healthcheck = renamed(s.healthcheck, HEALTHCHECK_NAMES, 'here');
  return s as ContainerSettings;
}

/** The settings that are set, under the wire's (compose's) names. */
export function containerSettingsToWire(s: ContainerSettings): WireContainerSettings {
  const w = renamed(s, NAMES, 'wire') as WireContainerSettings;
  if (s.healthcheck && w.healthcheck) w.healthcheck = renamed(s.healthcheck, HEALTHCHECK_NAMES, 'wire');
  return w;
}

/** Only the container settings of a value that has them (and more). */
export function pickContainerSettings(s: ContainerSettings): ContainerSettings {
  return containerSettingsFromWire(containerSettingsToWire(s));
}

/** Problems of settings a schema cannot express, each prefixed by `at`. Empty when sound. */
export function checkContainerSettings(w: WireContainerSettings, at: string): string[] {
  const problems: string[] = [];
  const test = w.healthcheck?.test;
  if (test && !(test[0] === 'NONE' ? test.length === 1 : (test[0] === 'CMD' || test[0] === 'CMD-SHELL') && test.length > 1)) {
    problems.push(`${at}.healthcheck.test must be ["NONE"], ["CMD", program, args...] or ["CMD-SHELL", command]`);
  }
  for (const [name, l] of Object.entries(w.ulimits ?? {})) {
    if (typeof l !== 'number' && l.soft > l.hard && l.hard !== -1) problems.push(`${at}.ulimits.${name}: soft (${l.soft}) must not exceed hard (${l.hard})`);
  }
  return problems;
}

const DURATION_UNITS: Record<string, number> = { ns: 1, us: 1e3, '\u00b5s': 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 };

/** A compose duration in nanoseconds, or undefined when it is not one. */
export function parseDuration(text: string): number | undefined {
  if (!new RegExp(DURATION).test(text)) return undefined;
  let ns = 0;
  for (const [, amount, unit] of text.matchAll(/([0-9]+(?:\.[0-9]+)?)(ns|us|\u00b5s|ms|s|m|h)/g)) ns += Number(amount) * DURATION_UNITS[unit!]!;
  return Math.round(ns);
}

const BYTE_UNITS: Record<string, number> = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4, p: 1024 ** 5 };

/** Bytes for a compose byte size (binary multiples, as go-units' RAMInBytes), or undefined when it is not one. */
export function parseBytes(size: number | string): number | undefined {
  if (typeof size === 'number') return Number.isInteger(size) && size >= 0 ? size : undefined;
  const m = new RegExp(BYTES).exec(size);
  if (!m) return undefined;
  const [, unit = ''] = /([kKmMgGtTpP])?[iI]?[bB]?$/.exec(size.replace(/^[0-9. ]+/, '')) ?? [];
  return Math.trunc(Number.parseFloat(size) * BYTE_UNITS[unit.toLowerCase()]!);
}
