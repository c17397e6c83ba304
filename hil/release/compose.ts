/**
 * A device team's compose project, read and checked: the first half of "a release is a value"
 * (compose file -> images -> target state). Pure: the file's text in (and the files it names,
 * through `readFile`), a ComposeProject out, or one FleetlabError (HIL_ERR_COMPOSE) that lists
 * every problem at once, each with its file, line, key and what to do. A key the device's
 * target state cannot carry is refused by name, never dropped, unless the team lists it in
 * `ignoreComposeKeys`: then it is left out and the project says so (`ignored`).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { LineCounter, parseDocument } from 'yaml';
import { FleetlabError, errorText } from '../../src/errors.js';
import type { ContainerSettings } from '../../src/protocol/container-settings.js';
import { WireService, dependencyCycle, type ServiceLinks } from '../../src/protocol/target-state.js';
import { ComposeReport, lineOfKey, problem, type Found, type IgnoredKey } from './compose-report.js';
import { SETTING_KEYS, commandWords, readSetting } from './compose-settings.js';
import { parseEnvFile } from './env-file.js';
import { substitute } from './interpolate.js';
import { isMapping } from '../../src/mapping.js';

export { interpolate } from './interpolate.js';
export { splitWords } from './compose-settings.js';
export { ignoredWarning, type Found, type IgnoredKey } from './compose-report.js';

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
  /** `env_file:` entries in order, then `environment:` over them, as compose merges them. */
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
  /** Keys left out because `ignoreComposeKeys` names them: a run warns about each. */
  ignored: IgnoredKey[];
  /** Entries of `ignoreComposeKeys` that named no key of this file. */
  unusedIgnores: string[];
}

export interface ComposeOptions {
  /** For compose's `${VAR}` syntax (the `.env` file and the environment, in loadCompose). */
  variables?: Record<string, string | undefined>;
  /** `ignoreComposeKeys` of fleetlab.config: refused keys to leave out instead. */
  ignore?: readonly string[];
  /** The text of a file `env_file` names (an absolute path), undefined when there is none. */
  readFile?: (path: string) => string | undefined;
}

/** Service keys the target state carries. */
const SERVICE_KEYS = [
  'build', 'cap_add', 'cap_drop', 'command', 'depends_on', 'devices', 'env_file', 'environment', 'image', 'labels', 'network_mode', 'networks', 'ports',
  'privileged', 'restart', 'tmpfs', 'volumes', ...SETTING_KEYS,
].sort();

/**
 * Common compose keys the device's target state has no place for yet. Named apart from
 * unknown keys so the message can say they are known and not yet carried, not misspelt.
 */
const NOT_YET_CARRIED = new Set([
  'expose', 'container_name', 'security_opt', 'dns', 'dns_search', 'dns_opt', 'logging', 'mem_limit', 'mem_reservation', 'memswap_limit', 'cpus', 'cpu_shares',
  'cpuset', 'pids_limit', 'deploy', 'profiles', 'secrets', 'configs', 'tty', 'stdin_open', 'pid', 'ipc', 'group_add', 'volumes_from', 'links', 'external_links',
  'platform', 'pull_policy', 'scale', 'annotations', 'develop', 'extends', 'domainname', 'mac_address', 'userns_mode', 'cgroup_parent', 'oom_score_adj',
  'storage_opt', 'runtime', 'labels_file', 'attach', 'uts', 'gpus', 'post_start', 'pre_stop', 'device_cgroup_rules', 'blkio_config', 'isolation',
]);

const TOP_LEVEL_KEYS = new Set(['services', 'volumes', 'networks', 'name', 'version']);
const TOP_LEVEL_NOT_CARRIED = new Set(['secrets', 'configs', 'include', 'models']);
const NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
const RESTART: readonly RestartPolicy[] = ['no', 'always', 'on-failure', 'unless-stopped'];
const NOT_CARRIED = "is not supported by fleetlab yet: the device's target state has no place for it, so the service would run without it";

/** The compose file for a path that is a compose file or a directory holding one. */
export function findComposeFile(fileOrDir: string): string {
  const path = resolve(fileOrDir);
  if (!existsSync(path)) throw new FleetlabError('HIL_ERR_COMPOSE', `${path}: no such file or directory; pass your compose file or the directory that holds it`);
  if (!statSync(path).isDirectory()) return path;
  for (const name of COMPOSE_FILE_NAMES) if (existsSync(join(path, name))) return join(path, name);
  throw new FleetlabError('HIL_ERR_COMPOSE', `${path}: no compose file here (looked for ${COMPOSE_FILE_NAMES.join(', ')})`);
}

const readIfThere = (path: string): string | undefined => (existsSync(path) ? readFileSync(path, 'utf8') : undefined);

/**
 * The variables of compose's `${VAR}` syntax: the `.env` beside the compose file, read by the
 * rules compose reads it with (the same as an `env_file`: quotes, `export`, comments after a
 * value, `${VAR}` from the environment and the lines above, a key alone from the environment),
 * under the environment, which wins as in compose. A line it cannot read is refused with the
 * file and line, not skipped.
 */
export function composeVariables(file: string, env: Record<string, string | undefined>): Record<string, string | undefined> {
  const dotEnv = join(dirname(file), '.env');
  const text = readIfThere(dotEnv);
  if (text === undefined) return { ...env };
  const { values, problems } = parseEnvFile(text, env, 'inherit');
  if (problems.length) throw new FleetlabError('HIL_ERR_COMPOSE', problems.map((p) => `${dotEnv}:${p.line}: ${p.message}`).join('; '));
  return { ...values, ...env };
}


export interface LoadOptions {
  /** This process's environment unless given. */
  env?: Record<string, string | undefined>;
  /** `ignoreComposeKeys` of fleetlab.config. */
  ignore?: readonly string[];
}

/** The compose file's text and what parseCompose needs beside it. */
function composeInput(fileOrDir: string, options: LoadOptions): { text: string; file: string; options: ComposeOptions } {
  const file = findComposeFile(fileOrDir);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new FleetlabError('HIL_ERR_COMPOSE', `${file}: cannot read it: ${errorText(err)}`);
  }
  const variables = composeVariables(file, options.env ?? process.env);
  return { text, file, options: { variables, ...(options.ignore ? { ignore: options.ignore } : {}), readFile: readIfThere } };
}

/**
 * Reads and checks the compose project at a file or directory; variables come from its `.env`
 * and `env` (this process's environment), as compose takes them; files `env_file` names are
 * read relative to the compose file.
 */
export function loadCompose(fileOrDir: string, options: LoadOptions = {}): ComposeProject {
  const input = composeInput(fileOrDir, options);
  return parseCompose(input.text, input.file, input.options);
}

export interface ComposeCheck {
  /** What could be read; services with a problem of their own are left out. */
  project: ComposeProject;
  /** Every service the file names. */
  serviceNames: string[];
  /** Keys fleetlab does not carry (and the ignore list does not name), with their lines. */
  refused: Found[];
  /** Values fleetlab cannot use, with their lines. */
  problems: Found[];
  /** The one error loadCompose would throw, when there is anything to say. */
  error?: FleetlabError;
}

/** loadCompose that reports what is wrong instead of throwing it (an unreadable file or YAML still throws). */
export function checkCompose(fileOrDir: string, options: LoadOptions = {}): ComposeCheck {
  const input = composeInput(fileOrDir, options);
  const { project, report } = readProject(input.text, input.file, input.options);
  const error = report.error(SERVICE_KEYS);
  return { project, serviceNames: [...report.serviceNames], refused: report.refused, problems: report.problems, ...(error ? { error } : {}) };
}


/** Interpolates every string; a bad one is noted at its key and left as written. */
function interpolateAll(report: ComposeReport, node: unknown, variables: Record<string, string | undefined>, path: string): unknown {
  if (typeof node === 'string') {
    return report.attempt(() => {
      try {
        return substitute(node, (name) => variables[name]);
      } catch (err) {
        throw problem(path, (err as Error).message);
      }
    }) ?? node;
  }
  if (Array.isArray(node)) return node.map((item, i) => interpolateAll(report, item, variables, `${path}[${i}]`));
  if (isMapping(node)) return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, interpolateAll(report, v, variables, path ? `${path}.${k}` : k)]));
  return node;
}

/**
 * Parses compose text read from `file` (absolute; relative build contexts and env files
 * resolve against its directory).
 */
export function parseCompose(text: string, file: string, options: ComposeOptions = {}): ComposeProject {
  const { project, report } = readProject(text, file, options);
  const error = report.error(SERVICE_KEYS);
  if (error) throw error;
  return project;
}

/** The project as far as it can be read, and the report of what could not. */
function readProject(text: string, file: string, options: ComposeOptions): { project: ComposeProject; report: ComposeReport } {
  const counter = new LineCounter();
  const doc = parseDocument(text, { merge: true, lineCounter: counter, prettyErrors: false });
  const yamlError = doc.errors[0];
  if (yamlError) {
    const line = counter.linePos(yamlError.pos[0]).line;
    throw new FleetlabError('HIL_ERR_COMPOSE', `${file}:${line}: not valid YAML: ${yamlError.message.split('\n')[0]}`);
  }
  const report = new ComposeReport(file, options.ignore ?? [], (key) => lineOfKey(doc, counter, key));
  const parsed: unknown = doc.toJS({ maxAliasCount: 1000 });
  const variables = options.variables ?? {};
  // x-* blocks are anchors for the rest, never read: their variables need not be set.
  const top = isMapping(parsed) ? Object.fromEntries(Object.entries(parsed).map(([k, v]) => [k, k.startsWith('x-') ? v : interpolateAll(report, v, variables, k)])) : parsed;
  if (!isMapping(top)) throw new FleetlabError('HIL_ERR_COMPOSE', `${file}: (top level): expected a mapping with a \`services:\` key`);
  for (const key of Object.keys(top)) {
    if (key.startsWith('x-') || TOP_LEVEL_KEYS.has(key)) continue;
    if (TOP_LEVEL_NOT_CARRIED.has(key)) report.refuse(key, 'not-carried', `not supported by fleetlab (supported top-level keys: ${[...TOP_LEVEL_KEYS].join(', ')}, x-*)`);
    else report.refuse(key, 'unknown', `is not a top-level compose key fleetlab knows (supported: ${[...TOP_LEVEL_KEYS].join(', ')}, x-*)`);
  }
  const name = report.attempt(() => {
    const n = top.name === undefined ? basename(dirname(file)) || 'app' : top.name;
    if (typeof n !== 'string' || n === '') throw problem('name', 'must be a non-empty string');
    return n;
  }) ?? 'app';

  const volumes = report.attempt(() => declared(report, 'volumes', top.volumes)) ?? [];
  // `default` is every app's own network: declaring it (to no effect) is allowed, as in compose.
  const networks = (report.attempt(() => declared(report, 'networks', top.networks)) ?? []).filter((n) => n !== 'default');
  const services: ComposeService[] = [];
  if (!isMapping(top.services) || Object.keys(top.services).length === 0) report.attempt(() => { throw problem('services', 'needs at least one service'); });
  else {
    report.serviceNames = Object.keys(top.services);
    const context: ServiceContext = { file, report, volumes, networks, variables, readFile: options.readFile };
    for (const [serviceName, raw] of Object.entries(top.services)) {
      const service = parseService(context, serviceName, raw);
      if (service) services.push(service);
    }
    if (services.length === Object.keys(top.services).length) report.attempt(() => checkDependencies(services));
  }
  return { project: { file, name, services, volumes, networks, ignored: report.ignored, unusedIgnores: report.unusedIgnores() }, report };
}

/** Top-level `volumes:` or `networks:`: names only, as the device creates them (local volumes, bridge networks). */
function declared(report: ComposeReport, key: 'volumes' | 'networks', raw: unknown): string[] {
  if (raw === undefined || raw === null) return [];
  const what = key === 'volumes' ? 'volume' : 'network';
  if (!isMapping(raw)) throw problem(key, `must be a mapping of ${what} names`);
  const creates = key === 'volumes' ? 'local volumes' : 'bridge networks';
  for (const [name, options] of Object.entries(raw)) {
    if (!NAME.test(name)) throw problem(`${key}.${name}`, `a ${what} name may hold letters, digits, _ . - and must start with a letter or digit`);
    if (options === null || options === undefined) continue;
    if (!isMapping(options)) throw problem(`${key}.${name}`, `declare it as \`${name}: {}\``);
    for (const option of Object.keys(options)) {
      report.refuse(`${key}.${name}.${option}`, 'not-carried', `${what} options (driver, external, ...) are not supported by fleetlab: the device creates ${creates}; declare it as \`${name}: {}\``);
    }
  }
  return Object.keys(raw);
}

/** Every `depends_on` names a service of the file, they do not go round in a circle, and a service waited on for its health has a check. */
function checkDependencies(services: readonly ComposeService[]): void {
  const names = new Set(services.map((s) => s.name));
  for (const s of services) {
    for (const dep of s.dependsOn ?? []) {
      if (dep === s.name) throw problem(`services.${s.name}.depends_on`, 'a service cannot depend on itself');
      if (!names.has(dep)) throw problem(`services.${s.name}.depends_on`, `"${dep}" is not a service in this file (services: ${[...names].join(', ')})`);
    }
    for (const dep of s.dependsOnHealthy ?? []) {
      if (services.find((d) => d.name === dep)?.healthcheck?.test?.[0] === 'NONE') {
        throw problem(`services.${s.name}.depends_on.${dep}.condition`, `service_healthy waits for ${dep} to be healthy, but its healthcheck is disabled: give ${dep} a healthcheck or wait for service_started`);
      }
    }
  }
  const cycle = dependencyCycle(new Map(services.map((s) => [s.name, s.dependsOn ?? []])));
  if (cycle) throw problem('services', `depends_on goes round in a circle: ${cycle.join(' -> ')}; break one of these links`);
}

interface ServiceContext {
  file: string;
  report: ComposeReport;
  volumes: readonly string[];
  networks: readonly string[];
  variables: Record<string, string | undefined>;
  readFile: ComposeOptions['readFile'];
}

const LISTS = [
  ['cap_add', 'capAdd', 'capability names such as NET_ADMIN'],
  ['cap_drop', 'capDrop', 'capability names such as NET_ADMIN'],
  ['devices', 'devices', '`/dev/host[:/dev/container[:rwm]]` entries'],
  ['tmpfs', 'tmpfs', 'absolute paths, each optionally `:options` (e.g. /run:size=64m)'],
  ['ports', 'ports', '`[ip:]hostPort:containerPort[/tcp|/udp]` entries (a device has no random host port to report back: name the host port)'],
] as const;

function parseService(context: ServiceContext, name: string, raw: unknown): ComposeService | undefined {
  const { report } = context;
  const at = `services.${name}`;
  return report.attempt(() => {
    if (!NAME.test(name) || name.length > 63) throw problem(at, 'a service name may hold letters, digits, _ . - (at most 63) and must start with a letter or digit');
    if (!isMapping(raw)) throw problem(at, 'must be a mapping');
    const service: ComposeService = { name, environment: {}, labels: {}, volumes: [] };
    let envFiles: Record<string, string> = {};
    for (const [key, value] of Object.entries(raw)) {
      if (key.startsWith('x-')) continue;
      const where = `${at}.${key}`;
      if (!SERVICE_KEYS.includes(key)) {
        report.refuse(where, NOT_YET_CARRIED.has(key) ? 'not-carried' : 'unknown', NOT_YET_CARRIED.has(key) ? NOT_CARRIED : 'is not a compose key fleetlab knows (misspelt?)');
        continue;
      }
      report.attempt(() => {
        if ((SETTING_KEYS as readonly string[]).includes(key)) return readSetting(report, at, key as (typeof SETTING_KEYS)[number], value, service);
        const list = LISTS.find(([k]) => k === key);
        if (list) return void (service[list[1]] = stringList(where, key === 'tmpfs' && typeof value === 'string' ? [value] : value, list[0], list[2]));
        switch (key) {
          case 'environment':
            service.environment = stringMap(where, value, { fromShell: true });
            return;
          case 'env_file':
            envFiles = envFile(context, where, value);
            return;
          case 'labels':
            service.labels = stringMap(where, value, { fromShell: false });
            return;
          case 'volumes':
            service.volumes = mounts(where, value, context.volumes);
            return;
          case 'image':
            if (typeof value !== 'string' || !/^[^\s]+$/.test(value)) throw problem(where, 'must be an image reference such as `myapp/web:1`');
            service.image = value;
            return;
          case 'build':
            service.build = build(report, context.file, where, value);
            return;
          case 'command':
            service.command = commandWords(where, value, { emptyAllowed: false });
            return;
          case 'restart':
            if (!RESTART.includes(value as RestartPolicy)) throw problem(where, `must be one of ${RESTART.join(', ')} (on-failure:N is not supported)`);
            service.restart = value as RestartPolicy;
            return;
          case 'network_mode':
            if (typeof value !== 'string' || value === '') throw problem(where, 'must be a string such as `host`');
            service.networkMode = value;
            return;
          case 'networks':
            if (raw.network_mode !== undefined) throw problem(where, 'cannot be combined with network_mode (as in compose): keep one of them');
            service.networks = serviceNetworks(report, where, value, context.networks);
            return;
          case 'depends_on': {
            const { deps, healthy } = dependsOn(report, where, value);
            if (deps.length) service.dependsOn = deps;
            if (healthy.length) service.dependsOnHealthy = healthy;
            return;
          }
          case 'privileged':
            if (typeof value !== 'boolean') throw problem(where, 'must be true or false');
            service.privileged = value;
            return;
        }
      });
    }
    service.environment = { ...envFiles, ...service.environment };
    if (raw.image === undefined && raw.build === undefined) throw problem(at, 'needs `image:` or `build:`');
    return service;
  });
}

function stringList(at: string, raw: unknown, key: (typeof LISTS)[number][0], what: string): string[] {
  const entries = Array.isArray(raw) ? raw.map((v) => (typeof v === 'number' ? String(v) : v)) : raw;
  const schema = WireService.properties[key];
  if (!Value.Check(schema, entries)) {
    const bad = Array.isArray(entries) ? entries.find((e) => !Value.Check(schema, [e])) : undefined;
    throw problem(at, `${bad !== undefined ? `${JSON.stringify(bad)}: ` : ''}must be a list of ${what}`);
  }
  return entries as string[];
}

/** `env_file:` entries (a path, a list of them, or `{path, required}`), read in order, later files winning. */
function envFile(context: ServiceContext, at: string, raw: unknown): Record<string, string> {
  const entries = typeof raw === 'string' ? [raw] : raw;
  if (!Array.isArray(entries)) throw problem(at, 'must be a path, a list of paths, or a list of `{ path, required }`');
  const values: Record<string, string> = {};
  entries.forEach((entry, i) => context.report.attempt(() => {
    const where = Array.isArray(raw) ? `${at}[${i}]` : at;
    const { path, required } = typeof entry === 'string' ? { path: entry, required: true } : isMapping(entry) ? { path: entry.path, required: entry.required ?? true } : { path: undefined, required: true };
    if (isMapping(entry)) {
      for (const key of Object.keys(entry)) if (key !== 'path' && key !== 'required') context.report.refuse(`${where}.${key}`, 'not-carried', 'is not supported by fleetlab (supported: path, required)');
    }
    if (typeof path !== 'string' || path === '') throw problem(where, 'needs a path to a file of `KEY=value` lines');
    if (typeof required !== 'boolean') throw problem(`${where}.required`, 'must be true or false');
    const full = isAbsolute(path) ? path : resolve(dirname(context.file), path);
    const text = context.readFile?.(full);
    if (text === undefined) {
      if (!required) return;
      throw problem(where, `${full} does not exist${context.readFile ? '' : ' (this compose text was given without its directory, so no file can be read)'}: create it, or write \`{ path: ${path}, required: false }\``);
    }
    const parsed = parseEnvFile(text, context.variables);
    if (parsed.problems.length) throw problem(where, parsed.problems.map((p) => `${full}:${p.line}: ${p.message}`).join('; '));
    Object.assign(values, parsed.values);
  }));
  return values;
}

/** A service's `networks:` as a list of names or a mapping of names to nothing (per-network options are refused). */
function serviceNetworks(report: ComposeReport, at: string, raw: unknown, declaredNetworks: readonly string[]): string[] {
  let names: string[];
  if (Array.isArray(raw)) {
    if (!raw.every((n) => typeof n === 'string')) throw problem(at, 'must be a list of network names');
    names = raw as string[];
  } else if (isMapping(raw)) {
    for (const [n, options] of Object.entries(raw)) {
      if (options === null) continue;
      if (!isMapping(options)) throw problem(`${at}.${n}`, `must be a mapping; write \`- ${n}\``);
      for (const option of Object.keys(options)) {
        report.refuse(`${at}.${n}.${option}`, 'not-carried', `per-network options are not supported by fleetlab: the service is reachable by its own name on each network; write \`- ${n}\``);
      }
    }
    names = Object.keys(raw);
  } else {
    throw problem(at, 'must be a list of network names');
  }
  if (names.length === 0) throw problem(at, 'is empty: leave it out to join the default network');
  for (const n of names) {
    if (n !== 'default' && !declaredNetworks.includes(n)) throw problem(at, `"${n}" is not declared under top-level networks: (declare it as \`networks: { ${n}: {} }\`)`);
  }
  return [...new Set(names)];
}

/** `depends_on:` as a list, or a mapping whose conditions the device honours: a started container, or a healthy one. */
function dependsOn(report: ComposeReport, at: string, raw: unknown): { deps: string[]; healthy: string[] } {
  if (Array.isArray(raw)) {
    if (!raw.every((n) => typeof n === 'string')) throw problem(at, 'must be a list of service names');
    return { deps: [...new Set(raw as string[])], healthy: [] };
  }
  if (!isMapping(raw)) throw problem(at, 'must be a list of service names or a mapping of them');
  const healthy: string[] = [];
  for (const [dep, options] of Object.entries(raw)) {
    if (options === null) continue;
    if (!isMapping(options)) throw problem(`${at}.${dep}`, 'must be a mapping such as `condition: service_healthy`');
    for (const [key, value] of Object.entries(options)) {
      const where = `${at}.${dep}.${key}`;
      if (key === 'condition') {
        if (value === 'service_healthy') healthy.push(dep);
        else if (value !== 'service_started') throw problem(where, `${JSON.stringify(value)} is not supported by fleetlab (the device does not wait for a service to exit): service_started or service_healthy`);
      } else if (key === 'required' && value === true) continue;
      else report.refuse(where, 'not-carried', 'is not supported by fleetlab (supported: condition, required: true)');
    }
  }
  return { deps: Object.keys(raw), healthy };
}

/** `environment:`/`labels:` as a mapping or a list of `KEY=VALUE`; numbers and booleans become strings as compose does. */
function stringMap(at: string, raw: unknown, o: { fromShell: boolean }): Record<string, string> {
  if (raw === undefined || raw === null) return {};
  const out: Record<string, string> = {};
  const put = (key: string, value: unknown) => {
    if (key === '') throw problem(at, 'has an empty name');
    if (value === null || value === undefined) throw problem(`${at}.${key}`, `has no value${o.fromShell ? '; fleetlab does not read values from your shell' : ''}: write \`${key}=value\``);
    if (typeof value === 'object') throw problem(`${at}.${key}`, 'must be a string, number or boolean');
    out[key] = String(value);
  };
  if (Array.isArray(raw)) {
    for (const item of raw) {
      if (typeof item !== 'string') throw problem(at, 'list items must be `KEY=value` strings');
      const eq = item.indexOf('=');
      if (eq < 0) put(item, undefined);
      else put(item.slice(0, eq), item.slice(eq + 1));
    }
    return out;
  }
  if (!isMapping(raw)) throw problem(at, 'must be a mapping or a list of `KEY=value`');
  for (const [key, value] of Object.entries(raw)) put(key, value);
  return out;
}

function mounts(at: string, raw: unknown, declaredVolumes: readonly string[]): string[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw problem(at, 'must be a list of `volume:/path` entries');
  return raw.map((entry) => {
    if (typeof entry !== 'string') throw problem(at, 'the long volume syntax is not supported; write `volume:/path[:ro]`');
    const [source, target, mode, ...rest] = entry.split(':');
    if (target === undefined || rest.length > 0 || (mode !== undefined && mode !== 'ro' && mode !== 'rw')) {
      throw problem(at, `"${entry}" is not \`volume:/path[:ro|:rw]\` (anonymous volumes are not supported)`);
    }
    if (source!.startsWith('.') || source!.startsWith('/') || source!.startsWith('~')) {
      throw problem(at, `"${entry}" is a bind mount of a host path; a device has no checkout of your repository: use a named volume declared under top-level volumes:`);
    }
    if (!declaredVolumes.includes(source!)) throw problem(at, `"${entry}" uses volume "${source}", which is not declared under top-level volumes:`);
    if (!target.startsWith('/')) throw problem(at, `"${entry}": the path in the container must be absolute`);
    return entry;
  });
}

function build(report: ComposeReport, file: string, at: string, raw: unknown): ComposeBuild {
  const base = dirname(file);
  const contextOf = (c: string, key: string) => {
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(c) || c.startsWith('git@')) throw problem(key, 'a remote build context is not supported: use a directory');
    return isAbsolute(c) ? c : resolve(base, c);
  };
  if (typeof raw === 'string') return { context: contextOf(raw, at), dockerfile: 'Dockerfile', args: {} };
  if (!isMapping(raw)) throw problem(at, 'must be a context path or a mapping with context:');
  for (const key of Object.keys(raw)) {
    if (!['context', 'dockerfile', 'args'].includes(key)) report.refuse(`${at}.${key}`, 'not-carried', 'is not supported by fleetlab (supported: context, dockerfile, args)');
  }
  const context = raw.context ?? '.';
  if (typeof context !== 'string') throw problem(`${at}.context`, 'must be a path');
  const dockerfile = raw.dockerfile ?? 'Dockerfile';
  if (typeof dockerfile !== 'string' || dockerfile === '') throw problem(`${at}.dockerfile`, 'must be a path relative to the context');
  return { context: contextOf(context, `${at}.context`), dockerfile, args: stringMap(`${at}.args`, raw.args, { fromShell: true }) };
}
