/**
 * A usage error ends with where that command's help is, so the next step is on the screen
 * rather than guessed. commander's own (unknown option or command, missing argument) get it
 * from showHelpAfterError; a flag whose value a command checks itself throws UsageError,
 * which `action` hands back to commander so it reads the same.
 */
import type { Command } from 'commander';

/** A flag or argument the command line got wrong (not a failure of what the command does). */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Set on the whole tree once it is built: commander copies the setting only to subcommands made after it. */
export function pointUsageErrorsAtHelp(program: Command): void {
  const walk = (command: Command, parents: string[]): void => {
    const path = [...parents, command.name()];
    command.showHelpAfterError(`Run '${path.join(' ')} --help' for usage.`);
    for (const sub of command.commands) walk(sub, path);
  };
  walk(program, []);
}
