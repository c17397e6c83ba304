/**
 * A command group's old name, kept so the scripts and CI recipes of users keep working: hidden
 * from `fleetlab --help`, and each of its subcommands prints one line on stderr naming its new
 * spelling (also before its `--help`), then runs as the new one does.
 */
import type { Command } from 'commander';

/**
 * Adds the hidden group `oldName` to `program`, which now lives at `newName`. `subcommands` maps
 * each old subcommand name to its new one and to the function that defines the new one's
 * description, options and action on a command it is given.
 */
export function addOldSpelling(
  program: Command,
  oldName: string,
  newName: string,
  subcommands: Record<string, { now: string; define: (command: Command) => unknown }>,
): void {
  const group = program
    .command(oldName, { hidden: true })
    .description(`Old spelling of \`fleetlab ${newName}\`, kept for scripts`)
    .hook('preSubcommand', (_group, sub) => {
      console.error(`fleetlab ${oldName} ${sub.name()} is now fleetlab ${newName} ${subcommands[sub.name()]?.now ?? sub.name()}`);
    });
  for (const [name, { define }] of Object.entries(subcommands)) define(group.command(name));
}
