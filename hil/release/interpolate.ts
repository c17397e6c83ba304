/**
 * Compose's variable syntax in one string: `$$` is a dollar; `${VAR}`, `$VAR`, `${VAR:-default}`
 * (unset or empty), `${VAR-default}` (unset), `${VAR:?message}` / `${VAR?message}` (required).
 * An unset variable without a default is an error, not an empty string: a device must not run
 * with a value that silently went missing.
 */
import { FleetlabError } from '../../src/errors.js';

/** The string with its variables substituted; throws an Error saying what to set or write. */
export function substitute(value: string, lookup: (name: string) => string | undefined): string {
  return value.replace(/\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])((?:[^}])*))?\}|([A-Za-z_][A-Za-z0-9_]*)|(\{[^}]*\}?))/g, (_m, dollar, braced, colon, op, arg, bare, bad) => {
    if (dollar) return '$';
    if (bad !== undefined) throw new Error(`"$${bad}" is not a variable compose understands (write $$ for a literal dollar)`);
    const name = (braced ?? bare) as string;
    const current = lookup(name);
    const missing = current === undefined || (colon === ':' && current === '');
    if (op === '-') return missing ? (arg as string) : current!;
    if (op === '?') {
      if (missing) throw new Error(`variable ${name} is required${arg ? ` (${arg})` : ''}: set it in the .env file next to the compose file or in your environment`);
      return current!;
    }
    if (current === undefined) throw new Error(`variable ${name} is not set: set it in the .env file next to the compose file or in your environment, or write \${${name}:-default}`);
    return current;
  });
}

/** `substitute` with `variables`, failing with a HIL_ERR_COMPOSE that starts with `where()`. */
export function interpolate(value: string, variables: Record<string, string | undefined>, where: () => string): string {
  try {
    return substitute(value, (name) => variables[name]);
  } catch (err) {
    throw new FleetlabError('HIL_ERR_COMPOSE', `${where()}: ${(err as Error).message}`);
  }
}
