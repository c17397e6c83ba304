/**
 * A device team's compose project, read and checked: the first half of "a release is a value"
 * (compose file -> images -> target state). Pure: the file's text in, a ComposeProject out,
 * or one FleetlabError (HIL_ERR_COMPOSE) naming the file, the key and what to do. A key the
 * device's target state cannot carry is refused by name, never dropped.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { parse as parseYaml } from 'yaml';
import { FleetlabError, errorText } from '../../src/errors.js';
import type { ContainerSettings } from '../../src/protocol/container-settings.js';
import { WireService, dependencyCycle, type ServiceLinks } from '../../src/protocol/target-state.js';

/** The names compose looks for in a directory, in its order of preference. */
export const COMPOSE_FILE_NAMES = ['compose.yaml', 'compose.yml', 'docker-compose.yml', 'docker-compose.yaml'] as const;

export type RestartPolicy = 'no' | 'always' | 'on-failure' | 'unless-stopped';

export interface ComposeBuild {
  /** Absolute path of the build context. */
  context: string;
  /** The Dockerfile, relative to the context. */
  dockerfile: string;
  args: Record<string, string>;
}

export interface ComposeService extends ContainerSettings, ServiceLinks {
  name: string;
  /** `image:` as written; with `build:` it names the image the build produces. */
  image?: string;
  build?: ComposeBuild;
  environment: Record<string, string>;
  labels: Record<string, string>;
  /** `<named volume>:<path>[:ro|:rw]` */
  volumes: string[];
  command?: string[];
  restart?: RestartPolicy;
  networkMode?: string;
}

export interface ComposeProject {
  /** Absolute path of the compose file. */
  file: string;
  /** The project name: `name:`, else the directory's name. */
  name: string;
  services: ComposeService[];
  volumes: string[];
  /** Networks declared under top-level `networks:` (besides the `default` every app has). */
  networks: string[];
}

/** Service keys the target state carries, and what each becomes there. */
const SERVICE_KEYS = ['build', 'cap_add', 'cap_drop', 'command', 'depends_on', 'devices', 'environment', 'image', 'labels', 'network_mode', 'networks', 'ports', 'privileged', 'restart', 'tmpfs', 'volumes'] as const;

/**
 * Common compose keys the device's target state has no place for yet. Named apart from
 * unknown keys so the message can say they are known and not yet carried, not misspelt.
 */
const NOT_YET_CARRIED = new Set([
  'expose', 'healthcheck',
  'entrypoint', 'working_dir', 'user', 'hostname', 'env_file', 'container_name', 'stop_signal', 'stop_grace_period',
  'sysctls', 'ulimits', 'security_opt', 'extra_hosts', 'dns', 'logging', 'shm_size', 'mem_limit', 'cpus', 'deploy',
  'profiles', 'secrets', 'configs', 'init', 'read_only', 'tty', 'stdin_open', 'pid', 'ipc', 'group_add', 'volumes_from',
  'links', 'external_links', 'platform', 'pull_policy', 'scale', 'annotations', 'develop', 'extends',
]);

const TOP_LEVEL_KEYS = new Set(['services', 'volumes', 'networks', 'name', 'version']);
const NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
const RESTART: readonly RestartPolicy[] = ['no', 'always', 'on-failure', 'unless-stopped'];

/** Fails the read of `file` at `key` with what to do about it. */
function problem(file: string, key: string, message: string): FleetlabError {
  return new FleetlabError('HIL_ERR_COMPOSE', `${file}: ${key}: ${message}`);
}

/** The compose file for a path that is a compose file or a directory holding one. */
export function findComposeFile(fileOrDir: string): string {
  const path = resolve(fileOrDir);
  if (!existsSync(path)) throw new FleetlabError('HIL_ERR_COMPOSE', `${path}: no such file or directory; pass your compose file or the directory that holds it`);
  if (!statSync(path).isDirectory()) return path;
  for (const name of COMPOSE_FILE_NAMES) if (existsSync(join(path, name))) return join(path, name);
  throw new FleetlabError('HIL_ERR_COMPOSE', `${path}: no compose file here (looked for ${COMPOSE_FILE_NAMES.join(', ')})`);
}

/** `KEY=VALUE` lines of a `.env` file (comments, blank lines and optional quotes as compose reads them). */
export function parseDotEnv(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    const value = line.slice(eq + 1).trim();
    out[line.slice(0, eq).trim()] = /^(['"]).*\1$/.test(value) ? value.slice(1, -1) : value;
  }
  return out;
}

/** Reads and checks the compose project at a file or directory; variables come from its `.env` and this process's environment, as compose takes them. */
export function loadCompose(fileOrDir: string, env: Record<string, string | undefined> = process.env): ComposeProject {
  const file = findComposeFile(fileOrDir);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new FleetlabError('HIL_ERR_COMPOSE', `${file}: cannot read it: ${errorText(err)}`);
  }
  const dotEnv = join(dirname(file), '.env');
  const variables = { ...(existsSync(dotEnv) ? parseDotEnv(readFileSync(dotEnv, 'utf8')) : {}), ...env };
  return parseCompose(text, file, variables);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Compose's variable syntax in one string: `$$` is a dollar; `${VAR}`, `$VAR`, `${VAR:-default}`
 * (unset or empty), `${VAR-default}` (unset), `${VAR:?message}` / `${VAR?message}` (required).
 */
export function interpolate(value: string, variables: Record<string, string | undefined>, where: () => string): string {
  return value.replace(/\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])((?:[^}])*))?\}|([A-Za-z_][A-Za-z0-9_]*)|(\{[^}]*\}?))/g, (_m, dollar, braced, colon, op, arg, bare, bad) => {
    if (dollar) return '$';
    if (bad !== undefined) throw new FleetlabError('HIL_ERR_COMPOSE', `${where()}: "$${bad}" is not a variable compose understands (write $$ for a literal dollar)`);
    const name = (braced ?? bare) as string;
    const current = variables[name];
    const missing = current === undefined || (colon === ':' && current === '');
    if (op === '-') return missing ? (arg as string) : current!;
    if (op === '?') {
      if (missing) throw new FleetlabError('HIL_ERR_COMPOSE', `${where()}: variable ${name} is required${arg ? ` (${arg})` : ''}: set it in the .env file next to the compose file or in your environment`);
      return current!;
    }
    if (current === undefined) throw new FleetlabError('HIL_ERR_COMPOSE', `${where()}: variable ${name} is not set: set it in the .env file next to the compose file or in your environment, or write \${${name}:-default}`);
    return current;
  });
}

function interpolateAll(node: unknown, variables: Record<string, string | undefined>, file: string, path: string): unknown {
  if (typeof node === 'string') return interpolate(node, variables, () => `${file}: ${path}`);
  if (Array.isArray(node)) return node.map((item, i) => interpolateAll(item, variables, file, `${path}[${i}]`));
  if (isObject(node)) return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, interpolateAll(v, variables, file, path ? `${path}.${k}` : k)]));
  return node;
}

/**
 * Parses compose text read from `file` (absolute; relative build contexts resolve against its
 * directory), with `variables` for compose's `${VAR}` syntax.
 */
export function parseCompose(text: string, file: string, variables: Record<string, string | undefined> = {}): ComposeProject {
  let parsed: unknown;
  try {
    parsed = parseYaml(text, { merge: true });
  } catch (err) {
    throw new FleetlabError('HIL_ERR_COMPOSE', `${file}: not valid YAML: ${errorText(err).split('\n')[0]}`);
  }
  // x-* blocks are anchors for the rest, never read: their variables need not be set.
  const doc = isObject(parsed) ? Object.fromEntries(Object.entries(parsed).map(([k, v]) => [k, k.startsWith('x-') ? v : interpolateAll(v, variables, file, k)])) : parsed;
  if (!isObject(doc)) throw problem(file, '(top level)', 'expected a mapping with a `services:` key');
  for (const key of Object.keys(doc)) {
    if (key.startsWith('x-')) continue; // compose extension fields: for anchors, never read
    if (!TOP_LEVEL_KEYS.has(key)) throw problem(file, key, `not supported by fleetlab (supported top-level keys: ${[...TOP_LEVEL_KEYS].join(', ')}, x-*)`);
  }
  const name = doc.name === undefined ? basename(dirname(file)) || 'app' : doc.name;
  if (typeof name !== 'string' || name === '') throw problem(file, 'name', 'must be a non-empty string');

  const volumes = declared(file, 'volumes', doc.volumes);
  // `default` is every app's own network: declaring it (to no effect) is allowed, as in compose.
  const networks = declared(file, 'networks', doc.networks).filter((n) => n !== 'default');
  if (!isObject(doc.services) || Object.keys(doc.services).length === 0) throw problem(file, 'services', 'needs at least one service');
  const services = Object.entries(doc.services).map(([serviceName, raw]) => parseService(file, serviceName, raw, volumes, networks));
  checkDependencies(file, services);
  return { file, name, services, volumes, networks };
}

/** Top-level `volumes:` or `networks:`: names only, as the device creates them (local volumes, bridge networks). */
function declared(file: string, key: 'volumes' | 'networks', raw: unknown): string[] {
  if (raw === undefined || raw === null) return [];
  const what = key === 'volumes' ? 'volume' : 'network';
  if (!isObject(raw)) throw problem(file, key, `must be a mapping of ${what} names`);
  for (const [name, options] of Object.entries(raw)) {
    if (!NAME.test(name)) throw problem(file, `${key}.${name}`, `a ${what} name may hold letters, digits, _ . - and must start with a letter or digit`);
    if (options !== null && options !== undefined && !(isObject(options) && Object.keys(options).length === 0)) {
      const creates = key === 'volumes' ? 'local volumes' : 'bridge networks';
      throw problem(file, `${key}.${name}`, `${what} options (driver, external, ...) are not supported by fleetlab: the device creates ${creates}; declare it as \`${name}: {}\``);
    }
  }
  return Object.keys(raw);
}

/** Every `depends_on` names a service of the file, and they do not go round in a circle. */
function checkDependencies(file: string, services: readonly ComposeService[]): void {
  const names = new Set(services.map((s) => s.name));
  for (const s of services) {
    for (const dep of s.dependsOn ?? []) {
      if (dep === s.name) throw problem(file, `services.${s.name}.depends_on`, 'a service cannot depend on itself');
      if (!names.has(dep)) throw problem(file, `services.${s.name}.depends_on`, `"${dep}" is not a service in this file (services: ${[...names].join(', ')})`);
    }
  }
  const cycle = dependencyCycle(new Map(services.map((s) => [s.name, s.dependsOn ?? []])));
  if (cycle) throw problem(file, 'services', `depends_on goes round in a circle: ${cycle.join(' -> ')}; break one of these links`);
}

function parseService(file: string, name: string, raw: unknown, volumes: readonly string[], networks: readonly string[]): ComposeService {
  const at = `services.${name}`;
  if (!NAME.test(name) || name.length > 63) throw problem(file, at, 'a service name may hold letters, digits, _ . - (at most 63) and must start with a letter or digit');
  if (!isObject(raw)) throw problem(file, at, 'must be a mapping');
  for (const key of Object.keys(raw)) {
    if (key.startsWith('x-')) continue;
    if ((SERVICE_KEYS as readonly string[]).includes(key)) continue;
    const why = NOT_YET_CARRIED.has(key) ? "is not supported by fleetlab yet: the device's target state has no place for it, so the service would run without it" : 'is not a compose key fleetlab knows (misspelt?)';
    throw problem(file, `${at}.${key}`, `${why}; remove it or use only ${SERVICE_KEYS.join(', ')}`);
  }
  const service: ComposeService = {
    name,
    environment: stringMap(file, `${at}.environment`, raw.environment),
    labels: stringMap(file, `${at}.labels`, raw.labels),
    volumes: mounts(file, `${at}.volumes`, raw.volumes, volumes),
  };
  if (raw.image !== undefined) {
    if (typeof raw.image !== 'string' || !/^[^\s]+$/.test(raw.image)) throw problem(file, `${at}.image`, 'must be an image reference such as `myapp/web:1`');
    service.image = raw.image;
  }
  if (raw.build !== undefined) service.build = build(file, `${at}.build`, raw.build);
  if (!service.image && !service.build) throw problem(file, at, 'needs `image:` or `build:`');
  if (raw.command !== undefined) service.command = command(file, `${at}.command`, raw.command);
  if (raw.restart !== undefined) {
    if (!RESTART.includes(raw.restart as RestartPolicy)) throw problem(file, `${at}.restart`, `must be one of ${RESTART.join(', ')} (on-failure:N is not supported)`);
    service.restart = raw.restart as RestartPolicy;
  }
  if (raw.network_mode !== undefined) {
    if (typeof raw.network_mode !== 'string' || raw.network_mode === '') throw problem(file, `${at}.network_mode`, 'must be a string such as `host`');
    service.networkMode = raw.network_mode;
  }
  if (raw.networks !== undefined) {
    if (service.networkMode) throw problem(file, `${at}.networks`, 'cannot be combined with network_mode (as in compose): keep one of them');
    service.networks = serviceNetworks(file, `${at}.networks`, raw.networks, networks);
  }
  if (raw.depends_on !== undefined) {
    const deps = dependsOn(file, `${at}.depends_on`, raw.depends_on);
    if (deps.length) service.dependsOn = deps;
  }
  if (raw.privileged !== undefined) {
    if (typeof raw.privileged !== 'boolean') throw problem(file, `${at}.privileged`, 'must be true or false');
    service.privileged = raw.privileged;
  }
  const lists = [
    ['cap_add', 'capAdd', 'capability names such as NET_ADMIN'],
    ['cap_drop', 'capDrop', 'capability names such as NET_ADMIN'],
    ['devices', 'devices', '`/dev/host[:/dev/container[:rwm]]` entries'],
    ['tmpfs', 'tmpfs', 'absolute paths, each optionally `:options` (e.g. /run:size=64m)'],
    ['ports', 'ports', '`[ip:]hostPort:containerPort[/tcp|/udp]` entries (a device has no random host port to report back: name the host port)'],
  ] as const;
  for (const [key, field, what] of lists) {
    if (raw[key] === undefined) continue;
    const value = key === 'tmpfs' && typeof raw[key] === 'string' ? [raw[key]] : raw[key];
    const entries = Array.isArray(value) ? value.map((v) => (typeof v === 'number' ? String(v) : v)) : value;
    if (!Value.Check(WireService.properties[key], entries)) {
      const bad = Array.isArray(entries) ? entries.find((e) => !Value.Check(WireService.properties[key], [e])) : undefined;
      throw problem(file, `${at}.${key}`, `${bad !== undefined ? `${JSON.stringify(bad)}: ` : ''}must be a list of ${what}`);
    }
    service[field] = entries as string[];
  }
  return service;
}

/** A service's `networks:` as a list of names or a mapping of names to nothing (per-network options are refused). */
function serviceNetworks(file: string, at: string, raw: unknown, declaredNetworks: readonly string[]): string[] {
  let names: string[];
  if (Array.isArray(raw)) {
    if (!raw.every((n) => typeof n === 'string')) throw problem(file, at, 'must be a list of network names');
    names = raw as string[];
  } else if (isObject(raw)) {
    for (const [n, options] of Object.entries(raw)) {
      if (options !== null && !(isObject(options) && Object.keys(options).length === 0)) {
        throw problem(file, `${at}.${n}`, `per-network options (${isObject(options) ? Object.keys(options).join(', ') : 'a value'}) are not supported by fleetlab: the service is reachable by its own name on each network; write \`- ${n}\``);
      }
    }
    names = Object.keys(raw);
  } else {
    throw problem(file, at, 'must be a list of network names');
  }
  if (names.length === 0) throw problem(file, at, 'is empty: leave it out to join the default network');
  for (const n of names) {
    if (n !== 'default' && !declaredNetworks.includes(n)) throw problem(file, at, `"${n}" is not declared under top-level networks: (declare it as \`networks: { ${n}: {} }\`)`);
  }
  return [...new Set(names)];
}

/** `depends_on:` as a list, or a mapping whose conditions fleetlab can honour (a started container). */
function dependsOn(file: string, at: string, raw: unknown): string[] {
  if (Array.isArray(raw)) {
    if (!raw.every((n) => typeof n === 'string')) throw problem(file, at, 'must be a list of service names');
    return [...new Set(raw as string[])];
  }
  if (!isObject(raw)) throw problem(file, at, 'must be a list of service names or a mapping of them');
  for (const [dep, options] of Object.entries(raw)) {
    if (options === null) continue;
    if (!isObject(options)) throw problem(file, `${at}.${dep}`, 'must be a mapping such as `condition: service_started`');
    for (const [key, value] of Object.entries(options)) {
      if (key === 'condition') {
        if (value === 'service_started') continue;
        throw problem(file, `${at}.${dep}.condition`, `${JSON.stringify(value)} is not supported by fleetlab (it has no healthchecks and does not wait for exits): only service_started`);
      }
      if (key === 'required' && value === true) continue;
      throw problem(file, `${at}.${dep}.${key}`, 'is not supported by fleetlab (supported: condition: service_started, required: true)');
    }
  }
  return Object.keys(raw);
}

/** `environment:`/`labels:` as a mapping or a list of `KEY=VALUE`; numbers and booleans become strings as compose does. */
function stringMap(file: string, at: string, raw: unknown): Record<string, string> {
  if (raw === undefined || raw === null) return {};
  const out: Record<string, string> = {};
  const put = (key: string, value: unknown) => {
    if (key === '') throw problem(file, at, 'has an empty name');
    if (value === null || value === undefined) throw problem(file, `${at}.${key}`, 'has no value; fleetlab does not read values from your shell: write `KEY=value`');
    if (typeof value === 'object') throw problem(file, `${at}.${key}`, 'must be a string, number or boolean');
    out[key] = String(value);
  };
  if (Array.isArray(raw)) {
    for (const item of raw) {
      if (typeof item !== 'string') throw problem(file, at, 'list items must be `KEY=value` strings');
      const eq = item.indexOf('=');
      if (eq < 0) put(item, undefined);
      else put(item.slice(0, eq), item.slice(eq + 1));
    }
    return out;
  }
  if (!isObject(raw)) throw problem(file, at, 'must be a mapping or a list of `KEY=value`');
  for (const [key, value] of Object.entries(raw)) put(key, value);
  return out;
}

function mounts(file: string, at: string, raw: unknown, declared: readonly string[]): string[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw problem(file, at, 'must be a list of `volume:/path` entries');
  return raw.map((entry) => {
    if (typeof entry !== 'string') throw problem(file, at, 'the long volume syntax is not supported; write `volume:/path[:ro]`');
    const [source, target, mode, ...rest] = entry.split(':');
    if (target === undefined || rest.length > 0 || (mode !== undefined && mode !== 'ro' && mode !== 'rw')) {
      throw problem(file, at, `"${entry}" is not \`volume:/path[:ro|:rw]\` (anonymous volumes are not supported)`);
    }
    if (source!.startsWith('.') || source!.startsWith('/') || source!.startsWith('~')) {
      throw problem(file, at, `"${entry}" is a bind mount of a host path; a device has no checkout of your repository: use a named volume declared under top-level volumes:`);
    }
    if (!declared.includes(source!)) throw problem(file, at, `"${entry}" uses volume "${source}", which is not declared under top-level volumes:`);
    if (!target.startsWith('/')) throw problem(file, at, `"${entry}": the path in the container must be absolute`);
    return entry;
  });
}

function build(file: string, at: string, raw: unknown): ComposeBuild {
  const base = dirname(file);
  const contextOf = (c: string, key: string) => {
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(c) || c.startsWith('git@')) throw problem(file, key, 'a remote build context is not supported: use a directory');
    return isAbsolute(c) ? c : resolve(base, c);
  };
  if (typeof raw === 'string') return { context: contextOf(raw, at), dockerfile: 'Dockerfile', args: {} };
  if (!isObject(raw)) throw problem(file, at, 'must be a context path or a mapping with context:');
  for (const key of Object.keys(raw)) {
    if (!['context', 'dockerfile', 'args'].includes(key)) throw problem(file, `${at}.${key}`, 'is not supported by fleetlab (supported: context, dockerfile, args)');
  }
  const context = raw.context ?? '.';
  if (typeof context !== 'string') throw problem(file, `${at}.context`, 'must be a path');
  const dockerfile = raw.dockerfile ?? 'Dockerfile';
  if (typeof dockerfile !== 'string' || dockerfile === '') throw problem(file, `${at}.dockerfile`, 'must be a path relative to the context');
  return { context: contextOf(context, `${at}.context`), dockerfile, args: stringMap(file, `${at}.args`, raw.args) };
}

/** `command:` as a list, or a string split as compose splits it (shell-like words, no shell). */
function command(file: string, at: string, raw: unknown): string[] {
  if (Array.isArray(raw)) {
    if (raw.length === 0 || !raw.every((a) => typeof a === 'string' || typeof a === 'number')) throw problem(file, at, 'must be a non-empty list of strings');
    return raw.map(String);
  }
  if (typeof raw !== 'string') throw problem(file, at, 'must be a string or a list of strings');
  const words = splitWords(raw);
  if (!words) throw problem(file, at, 'has an unterminated quote');
  if (words.length === 0) throw problem(file, at, 'is empty');
  return words;
}

/** Shell-like word splitting with '...' and "..." quotes and backslash escapes; undefined on an open quote. */
export function splitWords(text: string): string[] | undefined {
  const words: string[] = [];
  let word: string | undefined;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === '\\' && quote === '"' && i + 1 < text.length) word += text[++i];
      else word += c;
      continue;
    }
    if (c === "'" || c === '"') {
      quote = c;
      word ??= '';
    } else if (c === '\\' && i + 1 < text.length) {
      word = (word ?? '') + text[++i];
    } else if (/\s/.test(c)) {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else {
      word = (word ?? '') + c;
    }
  }
  if (quote) return undefined;
  if (word !== undefined) words.push(word);
  return words;
}
