/** `fleetlab sweep`: a team's update walked through fault points, each checked and replayable. */
import { Option, type Command } from 'commander';
import { action } from '../src/command/action.js';
import { UsageError } from '../src/command/usage-hint.js';

const wholeNumber = (flag: string) => (value: string) => {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) throw new UsageError(`${flag} takes a whole number, not ${JSON.stringify(value)}`);
  return n;
};

export function addSweepCommands(program: Command): void {
  program
    .command('sweep')
    .description('Deploy --from, then update to --to again and again on a fresh device, injecting a fault (default: cutting power) at points spread over the update (measured first): each point checked (the release runs, healthchecks pass, services stay up, your --check passes, the supervisor store is whole) and rerun alone by --only')
    .requiredOption('--from <compose>', 'the release the device runs: a compose file or directory')
    .requiredOption('--to <compose>', 'the update: a compose file or directory')
    .addOption(new Option('--target <name>', 'where the device runs').choices(['sim', 'container', 'qemu', 'board']).default('sim'))
    .option('--fault <name>', 'the fault injected at each point (repeat for several; they take turns): power-cut (default), supervisor-kill; on qemu and board also engine-restart, network-drop, disk-full', (v: string, all: string[]) => [...all, v], [] as string[])
    .option('--points <n>', 'how many points, spread over the update', wholeNumber('--points'), 10)
    .option('--workers <n>', 'devices at once, each running its own points (a board each on qemu)', wholeNumber('--workers'), 1)
    .option('--seed <n>', 'where in each slice of the update a point lands (default: random, printed)', wholeNumber('--seed'))
    .option('--only <point>', 'run one point again, as the table names it (power-cut@1830)')
    .option('--check <service: command>', "run after every point in the service's container; a non-zero exit breaks the point (e.g. 'db: test -s /data/db.sqlite')")
    .option('--settle <ms>', 'how long every service must then stay up with the same container', wholeNumber('--settle'))
    .option('--hold <ms>', 'how long a network-drop or disk-full lasts before it is undone (default 10000)', wholeNumber('--hold'))
    .option('--capture <dir>', "write each broken point's device there as a capture bundle, <point>.tar.gz, that 'fleetlab replay' starts from, beside its timeline, <point>.timeline.html (which goes to test-results/sweep/ without --capture)")
    .option('--json', 'print the result as JSON instead of the table', false)
    .action(
      action(async (opts: { from: string; to: string; target: string; fault: string[]; points: number; workers: number; seed?: number; only?: string; check?: string; settle?: number; hold?: number; capture?: string; json: boolean }) => {
        const { runSweepCommand } = await import('../hil/harness/sweep-command.js');
        process.exitCode = await runSweepCommand({
          from: opts.from,
          to: opts.to,
          target: opts.target,
          faults: opts.fault.length ? opts.fault : ['power-cut'],
          points: opts.points,
          workers: opts.workers,
          ...(opts.seed !== undefined ? { seed: opts.seed } : {}),
          ...(opts.only !== undefined ? { only: opts.only } : {}),
          ...(opts.check !== undefined ? { check: opts.check } : {}),
          ...(opts.settle !== undefined ? { settleMs: opts.settle } : {}),
          ...(opts.hold !== undefined ? { holdMs: opts.hold } : {}),
          ...(opts.capture !== undefined ? { captureDir: opts.capture } : {}),
          json: opts.json,
        });
      }),
    );
}
