/**
 * A device team's compose project, read and checked: the first half of "a release is a value"
 * (compose file -> images -> target state). Pure: the file's text in, a ComposeProject out,
 * or one FleetlabError (HIL_ERR_COMPOSE) naming the file, the key and what to do. A key the
 * device's target state cannot carry is refused by name, never dropped.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { FleetlabError, errorText } from '../../src/errors.js';

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

export interface ComposeService {
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
}

/** Service keys the target state carries, and what each becomes there. */
const SERVICE_KEYS = ['build', 'command', 'environment', 'image', 'labels', 'network_mode', 'restart', 'volumes'] as const;

/**
 * Common compose keys the device's target state has no place for yet. Named apart from
 * unknown keys so the message can say they are known and not yet carried, not misspelt.
 */
const NOT_YET_CARRIED = new Set([
  'ports', 'depends_on', 'privileged', 'devices', 'cap_add', 'cap_drop', 'tmpfs', 'networks', 'expose', 'healthcheck',
  'entrypoint', 'working_dir', 'user', 'hostname', 'env_file', 'container_name', 'stop_signal', 'stop_grace_period',
  'sysctls', 'ulimits', 'security_opt', 'extra_hosts', 'dns', 'logging', 'shm_size', 'mem_limit', 'cpus', 'deploy',
  'profiles', 'secrets', 'configs', 'init', 'read_only', 'tty', 'stdin_open', 'pid', 'ipc', 'group_add', 'volumes_from',
  'links', 'external_links', 'platform', 'pull_policy', 'scale', 'annotations', 'develop', 'extends',
]);

const TOP_LEVEL_KEYS = new Set(['services', 'volumes', 'name', 'version']);
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

/** Reads and checks the compose project at a file or directory. */
export function loadCompose(fileOrDir: string): ComposeProject {
  const file = findComposeFile(fileOrDir);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new FleetlabError('HIL_ERR_COMPOSE', `${file}: cannot read it: ${errorText(err)}`);
  }
  return parseCompose(text, file);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses compose text read from `file` (absolute; relative build contexts resolve against its directory). */
export function parseCompose(text: string, file: string): ComposeProject {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new FleetlabError('HIL_ERR_COMPOSE', `${file}: not valid YAML: ${errorText(err).split('\n')[0]}`);
  }
  if (!isObject(doc)) throw problem(file, '(top level)', 'expected a mapping with a `services:` key');
  for (const key of Object.keys(doc)) {
    if (key.startsWith('x-')) continue; // compose extension fields: for anchors, never read
    if (!TOP_LEVEL_KEYS.has(key)) throw problem(file, key, `not supported by fleetlab (supported top-level keys: ${[...TOP_LEVEL_KEYS].join(', ')}, x-*)`);
  }
  const name = doc.name === undefined ? basename(dirname(file)) : doc.name;
  if (typeof name !== 'string' || name === '') throw problem(file, 'name', 'must be a non-empty string');

  const volumes = declaredVolumes(file, doc.volumes);
  if (!isObject(doc.services) || Object.keys(doc.services).length === 0) throw problem(file, 'services', 'needs at least one service');
  const services = Object.entries(doc.services).map(([serviceName, raw]) => parseService(file, serviceName, raw, volumes));
  return { file, name, services, volumes };
}

function declaredVolumes(file: string, raw: unknown): string[] {
  if (raw === undefined || raw === null) return [];
  if (!isObject(raw)) throw problem(file, 'volumes', 'must be a mapping of volume names');
  for (const [name, options] of Object.entries(raw)) {
    if (!NAME.test(name)) throw problem(file, `volumes.${name}`, 'a volume name may hold letters, digits, _ . - and must start with a letter or digit');
    if (options !== null && options !== undefined && !(isObject(options) && Object.keys(options).length === 0)) {
      throw problem(file, `volumes.${name}`, 'volume options (driver, external, ...) are not supported by fleetlab: the device creates local volumes; declare it as `' + name + ': {}`');
    }
  }
  return Object.keys(raw);
}

function parseService(file: string, name: string, raw: unknown, volumes: readonly string[]): ComposeService {
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
  return service;
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
  const contextOf = (c: string) => (isAbsolute(c) ? c : resolve(base, c));
  if (typeof raw === 'string') return { context: contextOf(raw), dockerfile: 'Dockerfile', args: {} };
  if (!isObject(raw)) throw problem(file, at, 'must be a context path or a mapping with context:');
  for (const key of Object.keys(raw)) {
    if (!['context', 'dockerfile', 'args'].includes(key)) throw problem(file, `${at}.${key}`, 'is not supported by fleetlab (supported: context, dockerfile, args)');
  }
  const context = raw.context ?? '.';
  if (typeof context !== 'string') throw problem(file, `${at}.context`, 'must be a path');
  if (/^[a-z]+:\/\//.test(context)) throw problem(file, `${at}.context`, 'a remote build context is not supported: use a directory');
  const dockerfile = raw.dockerfile ?? 'Dockerfile';
  if (typeof dockerfile !== 'string' || dockerfile === '') throw problem(file, `${at}.dockerfile`, 'must be a path relative to the context');
  return { context: contextOf(context), dockerfile, args: stringMap(file, `${at}.args`, raw.args) };
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
