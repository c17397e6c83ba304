import { Command } from 'commander';
import { errorText, isFleetlabError } from '../errors.js';
import { UsageError } from './usage-hint.js';

/**
 * Runs a subcommand; any error ends the process with one readable line, not a stack. A
 * UsageError goes back to commander (the action's last argument is its command), which ends
 * it with the pointer to that command's --help.
 */
export function action<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      const command = args.at(-1);
      if (err instanceof UsageError && command instanceof Command) command.error(`error: ${err.message}`);
      console.error(`fleetlab: ${isFleetlabError(err) ? err.message : errorText(err)}`);
      process.exit(1);
    }
  };
}
