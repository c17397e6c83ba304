import { errorText, isFleetlabError } from '../errors.js';

/** Runs a subcommand; any error ends the process with one readable line, not a stack. */
export function action<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      console.error(`fleetlab: ${isFleetlabError(err) ? err.message : errorText(err)}`);
      process.exit(1);
    }
  };
}
