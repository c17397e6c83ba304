/**
 * The `config` map of a target state (docs/decisions.md item 15): string keys and values, checked
 * here and read through typed accessors. Unknown keys are kept and reported, never fatal.
 *
 * It lives in src/protocol, beside target-state.ts, because these rules are part of the wire
 * contract of a target (the cloud serves the same map the local API takes), not a choice of
 * the supervisor's: whoever checks a target checks its config by them.
 */
const flag = /^(0|1|true|false)$/;
const nonNegativeInt = /^[0-9]+$/;

const rules: Record<string, { test: (v: string) => boolean; expect: string }> = {
  SUPERVISOR_LOCAL_MODE: { test: (v) => flag.test(v), expect: '"1" or "0"' },
  SUPERVISOR_OVERRIDE_LOCK: { test: (v) => flag.test(v), expect: '"1" or "0"' },
  SUPERVISOR_VPN_CONTROL: { test: (v) => flag.test(v), expect: '"1" or "0"' },
  SUPERVISOR_CONNECTIVITY_CHECK: { test: (v) => flag.test(v), expect: '"1" or "0"' },
  SUPERVISOR_LOG_CONTROL: { test: (v) => flag.test(v), expect: '"1" or "0"' },
  SUPERVISOR_PERSISTENT_LOGGING: { test: (v) => flag.test(v), expect: '"1" or "0"' },
  SUPERVISOR_DELTA: { test: (v) => flag.test(v), expect: '"1" or "0"' },
  SUPERVISOR_POLL_INTERVAL: { test: (v) => nonNegativeInt.test(v) && Number(v) >= 10000, expect: 'an integer number of milliseconds, at least 10000' },
  SUPERVISOR_DELTA_REQUEST_TIMEOUT: { test: (v) => nonNegativeInt.test(v), expect: 'a non-negative integer (ms)' },
  SUPERVISOR_DELTA_APPLY_TIMEOUT: { test: (v) => nonNegativeInt.test(v), expect: 'a non-negative integer (ms)' },
  SUPERVISOR_DELTA_RETRY_COUNT: { test: (v) => nonNegativeInt.test(v), expect: 'a non-negative integer' },
  SUPERVISOR_DELTA_RETRY_INTERVAL: { test: (v) => nonNegativeInt.test(v), expect: 'a non-negative integer (ms)' },
  SUPERVISOR_DELTA_VERSION: { test: (v) => v === '2' || v === '3', expect: '"2" or "3"' },
};

const hostConfigKey = /^HOST_CONFIG_([A-Za-z0-9_]+)$/;

/** One message per malformed value, naming the key; empty when all are sound. */
export function checkDeviceConfig(config: Record<string, string>, at = 'local.config'): string[] {
  const problems: string[] = [];
  for (const [key, value] of Object.entries(config)) {
    const rule = rules[key];
    if (rule && !rule.test(value)) problems.push(`${at}.${key} must be ${rule.expect}, got "${value}"`);
    if (hostConfigKey.test(key) && /[\r\n\0]/.test(value)) problems.push(`${at}.${key} must be a single line`);
  }
  return problems;
}

export function unknownConfigKeys(config: Record<string, string>): string[] {
  return Object.keys(config).filter((k) => !(k in rules) && !hostConfigKey.test(k));
}

const truthy = (v: string | undefined) => v === '1' || v === 'true';

/** The typed settings a target's config map gives, with the defaults a device starts with. */
export interface DeviceSettings {
  /** SUPERVISOR_LOCAL_MODE; undefined when the target does not say, so the device keeps its mode. */
  readonly localMode: boolean | undefined;
  readonly overrideLock: boolean;
  readonly vpnControl: boolean;
  /** SUPERVISOR_POLL_INTERVAL; undefined: the supervisor's configured interval. */
  readonly pollIntervalMs: number | undefined;
  readonly deltaEnabled: boolean;
  /** HOST_CONFIG_<name> values by <name>. */
  readonly hostConfig: Readonly<Record<string, string>>;
}

/** Typed view of the config map with the defaults a device starts with. */
export function readDeviceConfig(config: Record<string, string>): DeviceSettings {
  return {
    localMode: config.SUPERVISOR_LOCAL_MODE === undefined ? undefined : truthy(config.SUPERVISOR_LOCAL_MODE),
    overrideLock: truthy(config.SUPERVISOR_OVERRIDE_LOCK),
    vpnControl: config.SUPERVISOR_VPN_CONTROL === undefined ? true : truthy(config.SUPERVISOR_VPN_CONTROL),
    pollIntervalMs: config.SUPERVISOR_POLL_INTERVAL ? Number(config.SUPERVISOR_POLL_INTERVAL) : undefined,
    deltaEnabled: truthy(config.SUPERVISOR_DELTA),
    hostConfig: Object.fromEntries(
      Object.entries(config)
        .map(([k, v]) => [hostConfigKey.exec(k)?.[1], v] as const)
        .filter((e): e is readonly [string, string] => e[0] !== undefined),
    ),
  };
}
