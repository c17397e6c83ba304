/**
 * The supervisor's one configuration object. Every setting is described once here, and the
 * description drives the config file keys, the FLEETLAB_* environment variables, the
 * command-line flags and `fleetlab supervisor --help`. Precedence: flag > env > file > default.
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { FleetlabError, errorText } from '../errors.js';
import { supervisorNetworkDefaults, supervisorNetworkProblems } from './supervisor-network.js';
import { acceptedRange, parseSupervisorVersion } from './versions.js';

export interface SupervisorConfig {
  port: number;
  listenAddress: string;
  publishAddress: string;
  dataDir: string;
  vendor: string;
  apiKey: string;
  uuid: string;
  localMode: boolean;
  deviceType: string;
  osVersion: string;
  supervisorAddress: string;
  supervisorNetwork: string;
  supervisorSubnet: string;
  supervisorContainer: string;
  hostNetworkContainer: string;
  dockerSocket: string;
  dbusAddress: string;
  ledGpio: string;
  ledActiveLow: boolean;
  proxyConfigDir: string;
  proxyUnit: string;
  bootConfigPath: string;
  journalDirectory: string;
  lockRoot: string;
  logLevel: string;
  cloudUrl: string;
  provisioningKey: string;
  pollIntervalMs: number;
  reportIntervalMs: number;
  tunnelHeartbeatMs: number;
  supervisorVersion: string;
  legacyVendor: string;
}

type Kind = 'string' | 'number' | 'boolean';

interface Setting {
  key: keyof SupervisorConfig;
  kind: Kind;
  defaultValue: string | number | boolean;
  description: string;
}

export const settings: readonly Setting[] = [
  { key: 'port', kind: 'number', defaultValue: 48484, description: 'TCP port of the device API' },
  { key: 'listenAddress', kind: 'string', defaultValue: '0.0.0.0', description: 'address the device API listens on' },
  { key: 'publishAddress', kind: 'string', defaultValue: '', description: "host address every published port of an app binds to, whatever its compose file says (a device sharing its engine with others); empty: as the compose file says" },
  { key: 'dataDir', kind: 'string', defaultValue: '/var/lib/fleetlab', description: 'persistent state (keys, uuid, target state); survives reboots' },
  { key: 'vendor', kind: 'string', defaultValue: 'platform', description: 'vendor word in PLATFORM_* variables and the io.platform.* label (e.g. "balena")' },
  { key: 'apiKey', kind: 'string', defaultValue: '', description: 'device API key on first start (generated when empty; kept in dataDir after that)' },
  { key: 'uuid', kind: 'string', defaultValue: '', description: 'device uuid on first start (generated when empty; kept in dataDir after that)' },
  { key: 'localMode', kind: 'boolean', defaultValue: false, description: 'start in local mode (target state from POST /v2/local/target-state)' },
  { key: 'deviceType', kind: 'string', defaultValue: 'raspberrypi3', description: 'device type slug reported by /v2/local/device-info' },
  { key: 'osVersion', kind: 'string', defaultValue: '', description: 'host OS version (read from /etc/os-release when empty)' },
  { key: 'supervisorAddress', kind: 'string', defaultValue: '', description: "PLATFORM_SUPERVISOR_ADDRESS of labelled services on the supervisor network (default http://<where the API answers on it>:<port>: its gateway, or the supervisor's container's address there); one in the host network gets http://127.0.0.1:<port>, or with a hostNetworkContainer not the supervisor's the network's address too" },
  { key: 'supervisorNetwork', kind: 'string', defaultValue: supervisorNetworkDefaults.name, description: 'engine network every service with the supervisor-api label joins; the API listens on its gateway' },
  { key: 'supervisorSubnet', kind: 'string', defaultValue: supervisorNetworkDefaults.subnet, description: 'its IPv4 subnet, gateway the first address; empty: the engine picks a free one (devices sharing an engine)' },
  { key: 'supervisorContainer', kind: 'string', defaultValue: '', description: "the engine container the supervisor runs in, when it runs in one on the engine it drives (a device simulated in a container): it joins the supervisor network, and labelled services reach the API at its address there; empty: on the engine's host, at the network's gateway" },
  { key: 'hostNetworkContainer', kind: 'string', defaultValue: '', description: "container whose network namespace is the device's host network (a device sharing its engine): services with network_mode: host run in it (network_mode: container:<it>), their ports, hostname and extra_hosts left out as the engine refuses them there; one not the supervisor's joins the supervisor network; empty: the engine host's network, as on a board" },
  { key: 'dockerSocket', kind: 'string', defaultValue: '/var/run/docker.sock', description: 'container engine API socket' },
  { key: 'dbusAddress', kind: 'string', defaultValue: '', description: 'D-Bus system bus address (default: DBUS_SYSTEM_BUS_ADDRESS or the system bus)' },
  { key: 'ledGpio', kind: 'string', defaultValue: '', description: 'identify LED line: "<chip label>:<offset>" or a global GPIO number; empty: no LED' },
  { key: 'ledActiveLow', kind: 'boolean', defaultValue: false, description: 'LED line is active low' },
  { key: 'proxyConfigDir', kind: 'string', defaultValue: '/mnt/boot/system-proxy', description: 'where redsocks.conf and no_proxy are written' },
  { key: 'proxyUnit', kind: 'string', defaultValue: 'redsocks.service', description: 'systemd unit restarted after a proxy change' },
  { key: 'bootConfigPath', kind: 'string', defaultValue: '/mnt/boot/config.txt', description: 'config.txt receiving HOST_CONFIG_* values' },
  { key: 'journalDirectory', kind: 'string', defaultValue: '', description: 'journal directory for journalctl --directory (empty: the system journal)' },
  { key: 'lockRoot', kind: 'string', defaultValue: '/tmp/fleetlab/locks', description: 'update lock directories, one per service (tmpfs on a board)' },
  { key: 'cloudUrl', kind: 'string', defaultValue: '', description: 'cloud API base URL (e.g. http://127.0.0.1:48400); empty: no cloud link' },
  { key: 'provisioningKey', kind: 'string', defaultValue: '', description: 'fleet provisioning key used once to register the device with the cloud' },
  { key: 'pollIntervalMs', kind: 'number', defaultValue: 900000, description: 'target state poll interval, ms (the target config SUPERVISOR_POLL_INTERVAL overrides it)' },
  { key: 'reportIntervalMs', kind: 'number', defaultValue: 2000, description: 'least time between two state reports to the cloud, ms' },
  { key: 'tunnelHeartbeatMs', kind: 'number', defaultValue: 15000, description: 'cloud tunnel ping interval, ms; two missed pongs count the link as down' },
  { key: 'supervisorVersion', kind: 'string', defaultValue: '', description: `answer as this upstream supervisor version X.Y.Z (${acceptedRange()}): its endpoints, request forms and behaviours only, from the spec's Versioning table (src/supervisor/versions.ts); empty: fleetlab's own, every endpoint` },
  { key: 'legacyVendor', kind: 'string', defaultValue: 'resin', description: 'with a supervisorVersion before 7.22.0: the legacy word in the variables of services with the supervisor-api label (RESIN_SUPERVISOR_ADDRESS, ...), as balena\'s supervisors had it' },
  { key: 'logLevel', kind: 'string', defaultValue: 'info', description: 'log level: fatal, error, warn, info, debug, trace, silent' },
];

const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
export const envName = (key: string) => `FLEETLAB_${key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
export const flagName = (key: string) => `--${kebab(key)}`;

function coerce(setting: Setting, raw: unknown, source: string): string | number | boolean {
  if (setting.kind === 'number') {
    const n = typeof raw === 'number' ? raw : Number(raw);
    if (!Number.isInteger(n) || n < 0) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${source}: ${setting.key} must be a non-negative integer, got ${JSON.stringify(raw)}`);
    return n;
  }
  if (setting.kind === 'boolean') {
    if (typeof raw === 'boolean') return raw;
    if (raw === '1' || raw === 'true') return true;
    if (raw === '0' || raw === 'false' || raw === '') return false;
    throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${source}: ${setting.key} must be true or false, got ${JSON.stringify(raw)}`);
  }
  if (typeof raw !== 'string') throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${source}: ${setting.key} must be a string`);
  return raw;
}

export interface ConfigSources {
  file?: string;
  env?: NodeJS.ProcessEnv;
  /** Values from command-line flags, keyed by setting key; undefined means not given. */
  flags?: Partial<Record<keyof SupervisorConfig, unknown>>;
}

function readConfigFile(path: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new FleetlabError('SUP_ERR_BAD_REQUEST', `config file ${path}: ${errorText(err)}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new FleetlabError('SUP_ERR_BAD_REQUEST', `config file ${path}: must hold a JSON object`);
  }
  const known = new Set<string>(settings.map((s) => s.key));
  const unknown = Object.keys(parsed).filter((k) => !known.has(k));
  if (unknown.length) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `config file ${path}: unknown setting(s) ${unknown.join(', ')}`);
  return parsed as Record<string, unknown>;
}

export function loadConfig(sources: ConfigSources = {}): SupervisorConfig {
  const env = sources.env ?? {};
  const file = sources.file ? readConfigFile(sources.file) : {};
  const out: Record<string, unknown> = {};
  for (const s of settings) {
    const fromFlag = sources.flags?.[s.key];
    const fromEnv = env[envName(s.key)];
    if (fromFlag !== undefined) out[s.key] = coerce(s, fromFlag, flagName(s.key));
    else if (fromEnv !== undefined) out[s.key] = coerce(s, fromEnv, envName(s.key));
    else if (file[s.key] !== undefined) out[s.key] = coerce(s, file[s.key], `config file ${sources.file}`);
    else out[s.key] = s.defaultValue;
  }
  const config = out as unknown as SupervisorConfig;
  if (config.port < 1 || config.port > 65535) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `port must be 1..65535, got ${config.port}`);
  if (!/^[a-z][a-z0-9]*$/.test(config.vendor)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `vendor must be a lowercase word, got "${config.vendor}"`);
  if (!/^[a-z][a-z0-9]*$/.test(config.legacyVendor)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `legacyVendor must be a lowercase word, got "${config.legacyVendor}"`);
  if (config.supervisorVersion) parseSupervisorVersion(config.supervisorVersion, `supervisorVersion (${flagName('supervisorVersion')}, ${envName('supervisorVersion')})`);
  if (config.publishAddress && !isIP(config.publishAddress)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `publishAddress must be an IPv4 or IPv6 address, got "${config.publishAddress}"`);
  const networkProblems = supervisorNetworkProblems({ name: config.supervisorNetwork, subnet: config.supervisorSubnet, supervisorContainer: config.supervisorContainer, hostNetworkContainer: config.hostNetworkContainer });
  if (networkProblems.length) throw new FleetlabError('SUP_ERR_BAD_REQUEST', networkProblems.join('; '));
  return config;
}

/** The settings as help text, one per line: flag, env, default, meaning. */
export function describeSettings(): string {
  return settings
    .map((s) => `  ${flagName(s.key).padEnd(22)} ${envName(s.key).padEnd(30)} default ${JSON.stringify(s.defaultValue).padEnd(24)} ${s.description}`)
    .join('\n');
}
