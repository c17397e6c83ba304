/**
 * A service's `env_file` as compose reads it (compose-go's dotenv): `KEY=value` or
 * `KEY: value` lines, `export ` before a key, `#` comments (also after an unquoted value),
 * single quotes literal, double quotes with `\n`/`\r` and `${VAR}` expanded, unquoted values
 * expanded too. Variables come from compose's own (`.env` and the environment), then from
 * the lines above. Pure: text in, values or the problems with their line numbers out.
 */
import { substitute } from './interpolate.js';

export interface EnvFileResult {
  values: Record<string, string>;
  problems: Array<{ line: number; message: string }>;
}

const KEY = /^[A-Za-z0-9_.]+$/;

function unescapeDouble(text: string): string {
  return text.replace(/\\(.)/g, (_m, c: string) => (c === 'n' ? '\n' : c === 'r' ? '\r' : c));
}

/**
 * `inherit`: a line with a key alone takes that variable's value from `variables` (compose's
 * `.env`, whose variables the environment overrides anyway); otherwise such a line is a problem
 * (an `env_file`, where fleetlab does not read values from the shell).
 */
export function parseEnvFile(text: string, variables: Record<string, string | undefined>, bareKeys: 'refuse' | 'inherit' = 'refuse'): EnvFileResult {
  const values: Record<string, string> = {};
  const problems: EnvFileResult['problems'] = [];
  const lookup = (name: string) => variables[name] ?? values[name];
  const lines = text.replace(/^\uFEFF/, '').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = i + 1;
    const statement = lines[i]!.trim();
    if (!statement || statement.startsWith('#')) continue;
    const body = statement.replace(/^export\s+/, '');
    const sep = body.search(/[=:]/);
    if (sep < 0) {
      if (bareKeys === 'inherit' && KEY.test(body)) {
        if (variables[body] !== undefined) values[body] = variables[body]!;
        continue;
      }
      problems.push({ line, message: `"${body}" has no value; fleetlab does not read values from your shell: write ${body}=value` });
      continue;
    }
    const key = body.slice(0, sep).trim();
    if (!KEY.test(key)) {
      problems.push({ line, message: `"${key}" is not a variable name (letters, digits, _ and .)` });
      continue;
    }
    let raw = body.slice(sep + 1).trim();
    try {
      if (raw.startsWith("'") || raw.startsWith('"')) {
        const quote = raw[0]!;
        let end = 1;
        while (end < raw.length && !(raw[end] === quote && raw[end - 1] !== '\\')) end++;
        // A quoted value may run over several lines, as compose allows.
        while (end >= raw.length && i + 1 < lines.length) {
          raw += `\n${lines[++i]}`;
          while (end < raw.length && !(raw[end] === quote && raw[end - 1] !== '\\')) end++;
        }
        if (end >= raw.length) throw new Error(`the value of ${key} has no closing ${quote}`);
        const inner = raw.slice(1, end);
        values[key] = quote === "'" ? inner : substitute(unescapeDouble(inner), lookup);
      } else {
        values[key] = substitute(raw.split('#')[0]!.trimEnd(), lookup);
      }
    } catch (err) {
      problems.push({ line, message: (err as Error).message });
    }
  }
  return { values, problems };
}
