/**
 * What never leaves a device in a bundle. Two rules, both applied to everything captured:
 *
 * - by name: a field, environment variable or config key whose name looks secret (key,
 *   token, password, secret, credential, auth, ...) keeps its name and loses its value;
 * - by value: the secrets the capture knows (device key, app keys, cloud key, provisioning
 *   key) are cut out of every string wherever they appear (a URL, a log line, an env value
 *   under an innocent name), and so is the password of any URL.
 *
 * `env` also drops every environment value; `none` keeps everything (the command warns).
 */
import type { Redaction } from './bundle.js';

export const REDACTED = '<redacted>';

export interface RedactOptions {
  policy: Redaction;
  /** Secret values known to the capture; shorter than 8 characters they are not matched (too common). */
  secrets: readonly string[];
}

const SECRET_NAME = /pass(word|wd|phrase)?|secret|token|credential|auth|cookie|session|private|keys?$|key_/i;
// Where a container's or service's environment lives: dockerd's inspect (`Env`, "K=V" list) and target states.
const ENV_FIELDS = new Set(['Env', 'env', 'environment']);
const MIN_SECRET = 8;

// Names the rule above would take for secrets but that name something else: a tag's name.
const NOT_SECRET = new Set(['tag_key']);

/** Whether a field or variable of this name holds a secret. */
export const secretName = (name: string): boolean => SECRET_NAME.test(name) && !NOT_SECRET.has(name);

/** A text (a journal, dmesg) with the known secrets and URL passwords cut out. */
export function redactText(text: string, options: RedactOptions): string {
  if (options.policy === 'none') return text;
  let out = text;
  for (const secret of options.secrets) {
    if (secret.length >= MIN_SECRET) out = out.split(secret).join(REDACTED);
  }
  // scheme://user:password@host: the user stays, it says which account.
  return out.replace(/([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*:)[^\s@/]*@/gi, `$1${REDACTED}@`);
}

/** A copy of a JSON value with both rules applied. */
export function redactJson<T>(value: T, options: RedactOptions): T {
  if (options.policy === 'none') return value;
  return walk(value, options) as T;
}

function walk(value: unknown, options: RedactOptions): unknown {
  if (typeof value === 'string') return redactText(value, options);
  if (Array.isArray(value)) return value.map((item) => walk(item, options));
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(value as Record<string, unknown>)) {
    if (secretName(name)) out[name] = blank(field);
    else if (ENV_FIELDS.has(name)) out[name] = redactEnv(field, options);
    else out[name] = walk(field, options);
  }
  return out;
}

/** Every leaf replaced, the shape kept: a reader still sees which apps had a key. */
function blank(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(blank);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, blank(v)]));
  return value === null || value === undefined || value === '' ? value : REDACTED;
}

function redactEnv(env: unknown, options: RedactOptions): unknown {
  const hide = (name: string) => options.policy === 'env' || secretName(name);
  if (Array.isArray(env)) {
    return env.map((entry) => {
      if (typeof entry !== 'string') return walk(entry, options);
      const eq = entry.indexOf('=');
      const name = eq < 0 ? entry : entry.slice(0, eq);
      if (eq < 0) return redactText(entry, options);
      return hide(name) ? `${name}=${REDACTED}` : `${name}=${redactText(entry.slice(eq + 1), options)}`;
    });
  }
  if (env !== null && typeof env === 'object') {
    return Object.fromEntries(Object.entries(env).map(([name, v]) => [name, hide(name) ? blank(v) : walk(v, options)]));
  }
  return walk(env, options);
}
