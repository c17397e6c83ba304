/** `fleetlab lab`: the boards test runs share, leased through the lab file's store. */
import { Option, type Command } from 'commander';
import { action } from '../src/command/action.js';
import { UsageError } from '../src/command/usage-hint.js';

const labFileOption = () => new Option('--lab <file>', 'the lab file').default('fleetlab.lab.yaml');
/** Runs `fn` on the lab file's boards and lease store, closing the store after. */
const withLab = async <T>(file: string, fn: (open: import('../hil/lab/lab-command.js').OpenLab) => Promise<T>): Promise<T> => {
  const { openLab } = await import('../hil/lab/lab-command.js');
  const open = await openLab(file);
  try {
    return await fn(open);
  } finally {
    await open.close();
  }
};

export function addLabCommands(program: Command): void {
  const lab = program.command('lab').description('A lab of boards shared by test runs (fleetlab.lab.yaml): who holds which board, runs on a leased board, leases that expire');
  lab
    .command('status')
    .description('Each board of the lab: reachable over SSH, its supervisor, its last health check, and who holds it until when (or why it is offline or quarantined)')
    .addOption(labFileOption())
    .action(
      action(async (opts: { lab: string }) => {
        const { labStatus } = await import('../hil/lab/lab-command.js');
        for (const line of await withLab(opts.lab, labStatus)) console.log(line);
      }),
    );
  lab
    .command('log')
    .description('The lease log: every lease acquired, released, expired (its holder stopped renewing) or forced')
    .addOption(labFileOption())
    .option('--board <name>', 'only this board')
    .action(
      action(async (opts: { lab: string; board?: string }) => {
        const { labLog } = await import('../hil/lab/lab-command.js');
        for (const line of await withLab(opts.lab, (open) => labLog(open, opts.board))) console.log(line);
      }),
    );
  lab
    .command('release <board>')
    .description("End a board's lease; another run's lease needs --force and is logged (that run stops at its next heartbeat)")
    .addOption(labFileOption())
    .option('--force', "end another run's lease", false)
    .action(
      action(async (board: string, opts: { lab: string; force: boolean }) => {
        const { labRelease } = await import('../hil/lab/lab-command.js');
        console.log(await withLab(opts.lab, (open) => labRelease(open, board, opts.force)));
      }),
    );
  lab
    .command('online <board>')
    .description('Put a board back in the lab after it was marked offline (it did not come back after its power control) or quarantined (a failed health check); logged')
    .addOption(labFileOption())
    .action(
      action(async (board: string, opts: { lab: string }) => {
        const { labOnline } = await import('../hil/lab/lab-command.js');
        console.log(await withLab(opts.lab, (open) => labOnline(open, board)));
      }),
    );
  lab
    .command('check [boards...]')
    .description("Check the boards' health now (all, or those named): SSH, the supervisor's /ping, the clock, free disk, / writable, the engine, a Pi's throttling; a failing board is quarantined, a passing one comes back. Exit 1 if a check failed")
    .addOption(labFileOption())
    .action(
      action(async (boards: string[], opts: { lab: string }) => {
        const { labCheck } = await import('../hil/lab/lab-command.js');
        const r = await withLab(opts.lab, (open) => labCheck(open, boards));
        for (const line of r.lines) console.log(line);
        if (!r.ok) process.exitCode = 1;
      }),
    );
  lab
    .command('watch')
    .description("Check every board's health each health.everySeconds until stopped (SIGINT, SIGTERM); one watch per lab, a second is refused")
    .addOption(labFileOption())
    .option('--rounds <n>', 'stop after this many rounds (default: run until stopped)')
    .action(
      action(async (opts: { lab: string; rounds?: string }) => {
        const rounds = opts.rounds === undefined ? undefined : Number(opts.rounds);
        if (rounds !== undefined && (!Number.isInteger(rounds) || rounds < 1)) throw new UsageError(`--rounds must be a whole number from 1, got ${opts.rounds}`);
        const { labWatch } = await import('../hil/lab/lab-command.js');
        await withLab(opts.lab, (open) => labWatch(open, { log: (line) => console.log(line), ...(rounds === undefined ? {} : { rounds }) }));
      }),
    );
  lab
    .command('serve')
    .description('Serve the lab page: every board, its state (free, leased by whom with the time left, offline or quarantined with the reason), its last checks, live; read-only unless FLEETLAB_LAB_ADMIN_KEY is set (then online and release, for requests bearing it)')
    .addOption(labFileOption())
    .option('--port <port>', 'the port to listen on', '48410')
    .option('--host <address>', 'the address to listen on (another than loopback shows the lab to the network)', '127.0.0.1')
    .action(
      action(async (opts: { lab: string; port: string; host: string }) => {
        const port = Number(opts.port);
        if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`--port must be a port number 0-65535, got ${opts.port}`);
        const { labServe } = await import('../hil/lab/lab-command.js');
        const adminKey = process.env.FLEETLAB_LAB_ADMIN_KEY || undefined;
        await withLab(opts.lab, (open) => labServe(open, { host: opts.host, port, ...(adminKey ? { adminKey } : {}), log: (line) => console.error(`fleetlab lab: ${line}`) }));
      }),
    );
  lab
    .command('run')
    .description("Lease a board with the tags (waiting in line while all are busy), run the command with FLEETLAB_BOARD_CONFIG set to that board's config, give the board back: e.g. fleetlab lab run --tag rpi4 -- npx fleetlab test --target board")
    .addOption(labFileOption())
    .option('--tag <tag>', 'a tag the board must have (repeat for several)', (v: string, all: string[]) => [...all, v], [] as string[])
    .option('--wait <seconds>', 'how long to wait for a free board', '3600')
    .argument('<command...>', 'the command to run, after --')
    .action(
      action(async (command: string[], opts: { lab: string; tag: string[]; wait: string }) => {
        const wait = Number(opts.wait);
        if (!Number.isInteger(wait) || wait < 0) throw new UsageError(`--wait must be a whole number of seconds, got ${opts.wait}`);
        const { labRun } = await import('../hil/lab/lab-command.js');
        process.exitCode = await withLab(opts.lab, (open) => labRun(open, { tags: opts.tag, command, waitMs: wait * 1000, log: (line) => console.error(`fleetlab lab: ${line}`) }));
      }),
    );
}
