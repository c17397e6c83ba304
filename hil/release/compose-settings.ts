/**
 * The compose keys that become a service's container settings on the device (healthcheck,
 * entrypoint, user, working_dir, stop_signal, stop_grace_period, init, read_only, sysctls,
 * ulimits, extra_hosts, hostname, shm_size), read in compose's syntaxes and normalised to
 * what the target state carries (container-settings.ts). Each reader throws a ComposeProblem
 * naming its key; pure.
 */
import type { TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { ULIMIT_NAMES, containerSettingsSchema, engineExtraHost, parseBytes, parseDuration, type ContainerSettings, type Healthcheck, type Ulimit } from '../../src/protocol/container-settings.js';
import { problem, type ComposeReport } from './compose-report.js';
import { isMapping } from '../../src/mapping.js';


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

/** A command as a list, or a string split as compose splits it (shell-like words, no shell). */
export function commandWords(at: string, raw: unknown, options: { emptyAllowed: boolean }): string[] {
  let words: string[] | undefined;
  if (Array.isArray(raw)) {
    if (!raw.every((a) => typeof a === 'string' || typeof a === 'number')) throw problem(at, 'must be a string or a list of strings');
    words = raw.map(String);
  } else if (typeof raw === 'string') {
    words = splitWords(raw);
    if (!words) throw problem(at, 'has an unterminated quote');
  } else {
    throw problem(at, 'must be a string or a list of strings');
  }
  if (words.length === 0 && !options.emptyAllowed) throw problem(at, 'is empty');
  return words;
}

/** Checks a value against the target state's own schema for the key, so what the reader accepts the device takes. */
function wire<T>(at: string, schema: TSchema, value: T, what: string): T {
  if (!Value.Check(schema, value)) throw problem(at, `${JSON.stringify(value)}: must be ${what}`);
  return value;
}

function duration(at: string, raw: unknown): string {
  if (typeof raw !== 'string' || parseDuration(raw) === undefined) {
    throw problem(at, `${JSON.stringify(raw)}: must be a duration such as 30s, 1m30s or 500ms${typeof raw === 'number' ? ` (write ${raw}s for seconds)` : ''}`);
  }
  return raw;
}

function boolean(at: string, raw: unknown): boolean {
  if (typeof raw !== 'boolean') throw problem(at, 'must be true or false');
  return raw;
}

/** `healthcheck:` as compose reads it: `test` as a string (run by the shell) or a list, `disable: true` for `["NONE"]`. */
function healthcheck(report: ComposeReport, at: string, raw: Record<string, unknown>): Healthcheck {
  const h: Healthcheck = {};
  for (const [key, value] of Object.entries(raw)) {
    const where = `${at}.${key}`;
    report.attempt(() => {
      switch (key) {
        case 'test':
          if (typeof value === 'string') {
            if (value.trim() === '') throw problem(where, 'is empty: give a command, or write `disable: true`');
            h.test = ['CMD-SHELL', value];
          } else if (Array.isArray(value) && value.every((v) => typeof v === 'string')) {
            const [kind, ...rest] = value as string[];
            const sound = kind === 'NONE' ? rest.length === 0 : (kind === 'CMD' || kind === 'CMD-SHELL') && rest.length > 0;
            if (!sound) throw problem(where, 'a list must be ["CMD", program, args...], ["CMD-SHELL", command] or ["NONE"]; a string runs in the shell');
            h.test = value as string[];
          } else {
            throw problem(where, 'must be a command string or a list such as ["CMD", "curl", "-f", "http://localhost"]');
          }
          break;
        case 'interval':
          h.interval = duration(where, value);
          break;
        case 'timeout':
          h.timeout = duration(where, value);
          break;
        case 'start_period':
          h.startPeriod = duration(where, value);
          break;
        case 'retries':
          if (!Number.isInteger(value) || (value as number) < 0) throw problem(where, 'must be a whole number, 0 or more');
          h.retries = value as number;
          break;
        case 'disable':
          if (boolean(where, value)) {
            if (raw.test !== undefined) throw problem(where, 'cannot be combined with test (as in compose): keep one of them');
            h.test = ['NONE'];
          }
          break;
        case 'start_interval':
          report.refuse(where, 'not-carried', "needs Engine API 1.44 (Docker Engine 25) and the device's engine speaks 1.41: the check would run at its interval from the start");
          break;
        default:
          report.refuse(where, 'unknown', 'is not a healthcheck key (test, interval, timeout, start_period, retries, disable)');
      }
    });
  }
  return h;
}

function ulimits(at: string, raw: unknown): Record<string, Ulimit> {
  if (!isMapping(raw)) throw problem(at, 'must be a mapping such as `nofile: { soft: 1024, hard: 4096 }` or `nproc: 512`');
  const out: Record<string, Ulimit> = {};
  for (const [name, value] of Object.entries(raw)) {
    const where = `${at}.${name}`;
    if (!(ULIMIT_NAMES as readonly string[]).includes(name)) throw problem(where, `is not a ulimit (${ULIMIT_NAMES.join(', ')})`);
    const limit = Number.isInteger(value) ? { soft: value as number, hard: value as number } : isMapping(value) ? { soft: value.soft, hard: value.hard } : undefined;
    if (!limit || !Number.isInteger(limit.soft) || !Number.isInteger(limit.hard)) throw problem(where, 'must be a whole number, or `{ soft: N, hard: N }`');
    const l = limit as Ulimit;
    if (l.hard !== -1 && (l.soft > l.hard || l.soft === -1)) throw problem(where, `soft (${l.soft}) must not exceed hard (${l.hard})`);
    out[name] = l;
  }
  return out;
}

/** `extra_hosts:` as a list (`host:ip`, `host=ip`) or a mapping of host to address(es), as the Engine's `host:ip`. */
function extraHosts(at: string, raw: unknown): string[] {
  let entries: string[];
  if (Array.isArray(raw) && raw.every((e) => typeof e === 'string')) entries = raw as string[];
  else if (isMapping(raw)) {
    entries = Object.entries(raw).flatMap(([host, ips]) => (Array.isArray(ips) ? ips : [ips]).map((ip) => `${host}=${String(ip ?? '')}`));
  } else throw problem(at, 'must be a list of `host:address` entries or a mapping of host to address');
  return entries.map((entry) => {
    if (!/^[^:=\s]+[:=]\S+$/.test(entry)) throw problem(at, `${JSON.stringify(entry)} is not \`host:address\` (or \`host=address\`)`);
    return engineExtraHost(entry);
  });
}

function stringValues(at: string, raw: unknown): Record<string, string> {
  const pairs: Array<[string, unknown]> = Array.isArray(raw)
    ? raw.map((item) => {
        if (typeof item !== 'string' || !item.includes('=')) throw problem(at, 'list items must be `name=value`');
        return [item.slice(0, item.indexOf('=')), item.slice(item.indexOf('=') + 1)];
      })
    : isMapping(raw) ? Object.entries(raw) : [];
  if (!Array.isArray(raw) && !isMapping(raw)) throw problem(at, 'must be a mapping or a list of `name=value`');
  for (const [key, value] of pairs) if (typeof value === 'object' || value === undefined) throw problem(`${at}.${key}`, 'must be a string, number or boolean');
  return Object.fromEntries(pairs.map(([k, v]) => [k, String(v)]));
}

/** The container-setting keys of compose this reader carries. */
export const SETTING_KEYS = ['healthcheck', 'entrypoint', 'user', 'working_dir', 'stop_signal', 'stop_grace_period', 'init', 'read_only', 'sysctls', 'ulimits', 'extra_hosts', 'hostname', 'shm_size'] as const;

/** Reads one of SETTING_KEYS into `into`; null leaves it unset, as compose does. */
export function readSetting(report: ComposeReport, at: string, key: (typeof SETTING_KEYS)[number], raw: unknown, into: ContainerSettings): void {
  if (raw === null || raw === undefined) return;
  const s = containerSettingsSchema;
  const where = `${at}.${key}`;
  switch (key) {
    case 'healthcheck':
      if (!isMapping(raw)) throw problem(where, 'must be a mapping with test, interval, timeout, start_period, retries or disable');
      into.healthcheck = healthcheck(report, where, raw);
      return;
    case 'entrypoint':
      into.entrypoint = commandWords(where, raw, { emptyAllowed: true });
      return;
    case 'user':
      into.user = wire(where, s.user, typeof raw === 'number' ? String(raw) : (raw as string), 'a user, `user:group` or `uid:gid`');
      return;
    case 'working_dir':
      if (typeof raw !== 'string' || !raw.startsWith('/')) throw problem(where, `${JSON.stringify(raw)}: must be an absolute path in the container (the engine refuses a relative one)`);
      into.workingDir = raw;
      return;
    case 'stop_signal':
      into.stopSignal = wire(where, s.stop_signal, raw as string, 'a signal such as SIGTERM, SIGINT or SIGRTMIN+3');
      return;
    case 'stop_grace_period':
      into.stopGracePeriod = duration(where, raw);
      return;
    case 'init':
      into.init = boolean(where, raw);
      return;
    case 'read_only':
      into.readOnly = boolean(where, raw);
      return;
    case 'sysctls':
      into.sysctls = wire(where, s.sysctls, stringValues(where, raw), 'sysctl names such as net.core.somaxconn with values');
      return;
    case 'ulimits':
      into.ulimits = ulimits(where, raw);
      return;
    case 'extra_hosts':
      into.extraHosts = extraHosts(where, raw);
      return;
    case 'hostname':
      into.hostname = wire(where, s.hostname, raw as string, 'a host name (letters, digits, . and -, at most 63)');
      return;
    case 'shm_size': {
      const bytes = typeof raw === 'number' || typeof raw === 'string' ? parseBytes(raw) : undefined;
      if (bytes === undefined) throw problem(where, `${JSON.stringify(raw)}: must be a size such as 64m, 1g or a number of bytes`);
      into.shmSize = bytes;
      return;
    }
  }
}
