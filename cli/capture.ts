/** `fleetlab capture`, `replay` and `bundle show`: a device's state taken away, looked at and started again. */
import { Option, type Command } from 'commander';
import { action } from '../src/command/action.js';
import { UsageError } from '../src/command/usage-hint.js';
import { parsePort } from './options.js';

export function addCaptureCommands(program: Command): void {
  program
    .command('capture')
    .description("Capture a device into one bundle file: its state, target, host config and journal, secrets redacted; read it with 'fleetlab bundle show'")
    .option('--device <url>', 'the device API, e.g. http://127.0.0.1:48484 (with --api-key)')
    .option('--api-key <key>', "the device's key (with --board: default the one in the supervisor's store on the board)")
    .option('--board <config>', "a lab board over SSH, by the board target's JSON config (see hil/boards/example.json): adds its store, lock files, engine objects, dmesg, clock, disk and network")
    .option('--cloud <url>', "a fleetlab cloud the device is registered to: alone, the device through the cloud's proxy, plus its cloud rows (with --cloud-key and --uuid); beside --device or --board, only its cloud rows, which 'fleetlab replay --cloud' seeds a local cloud with")
    .option('--cloud-key <key>', "with --cloud: a user's API key of that cloud")
    .option('--uuid <uuid>', "with --cloud: the device's uuid (beside --sim-dir or --board, read from the device's store)")
    .option('--sim-dir <dir>', "a simulated device on this host: its state directory (the 'state:' line of 'fleetlab sim device'); adds its store, lock files and engine objects, which 'fleetlab replay' starts from")
    .option('--out <file>', 'the bundle to write (default: fleetlab-capture-<time>.tar.gz here)')
    .option('--since <time>', 'the journal from this time on, in journalctl\'s formats (default: all, up to --journal-entries)')
    .option('--journal-entries <n>', 'the most journal entries kept, newest first', String(20_000))
    .option('--volumes [bytes]', "with a shell on the device: also the contents of its volumes, each up to this many bytes (default 16 MiB); not redacted, so only for volumes that hold no secrets; 'fleetlab replay' restores them")
    .option('--redact-env', 'also drop every environment value (names stay)', false)
    .option('--no-redact', 'keep keys, passwords and environment values in the bundle (warns)')
    .option('--force', 'replace a file at --out', false)
    .action(
      action(async (opts: { device?: string; apiKey?: string; board?: string; cloud?: string; cloudKey?: string; uuid?: string; simDir?: string; out?: string; since?: string; journalEntries: string; volumes?: string | true; redactEnv: boolean; redact: boolean; force: boolean }) => {
        const { parseJournalEntries, parseVolumeBytes, runCapture } = await import('../hil/harness/capture-command.js');
        if (!opts.redact && opts.redactEnv) throw new UsageError('--redact-env and --no-redact contradict each other: pick one');
        await runCapture({
          ...(opts.device ? { device: opts.device } : {}),
          ...(opts.apiKey ? { apiKey: opts.apiKey } : {}),
          ...(opts.board ? { board: opts.board } : {}),
          ...(opts.cloud ? { cloud: opts.cloud } : {}),
          ...(opts.cloudKey ? { cloudKey: opts.cloudKey } : {}),
          ...(opts.uuid ? { uuid: opts.uuid } : {}),
          ...(opts.simDir ? { simDir: opts.simDir } : {}),
          ...(opts.out ? { out: opts.out } : {}),
          ...(opts.since ? { since: opts.since } : {}),
          journalEntries: parseJournalEntries(opts.journalEntries),
          ...(opts.volumes !== undefined ? { volumeBytes: parseVolumeBytes(opts.volumes) } : {}),
          redaction: !opts.redact ? 'none' : opts.redactEnv ? 'env' : 'default',
          force: opts.force,
          log: (line) => console.error(`fleetlab capture: ${line}`),
        });
      }),
    );

  program
    .command('replay <bundle>')
    .description('Start a simulated device in the state a bundle captured (store, containers, images stood in, volumes, networks, lock files), and let its supervisor run from there')
    .option('--port <n>', 'device API port (0: pick a free one)', '0')
    .option('--data-dir <dir>', 'where the replayed device keeps its state (default: a new temporary directory; one holding a replayed device resumes it)')
    .addOption(new Option('--target <name>', "where: sim (a simulated device here), container (a device container on this machine's dockerd), qemu (the emulated Raspberry Pi; boots first)").choices(['sim', 'container', 'qemu']).default('sim'))
    .addOption(new Option('--engine <kind>', 'sim: an engine of its own; docker: the dockerd at --docker-socket, which must not run the captured device').choices(['sim', 'docker']).default('sim'))
    .option('--docker-socket <path>', 'with --engine docker: its API socket', '/var/run/docker.sock')
    .option('--listen-address <addr>', 'address the device API listens on (0.0.0.0 inside a container)', '127.0.0.1')
    .option('--paused', "start the device's supervisor stopped before its first line, for a debugger to attach and step (the inspector's port is printed)", false)
    .option('--cloud', "also start a local cloud seeded with the bundle's cloud rows (a capture with --cloud): the fleet, release, device, tags and variables as captured; the replayed device polls it and reports to it", false)
    .option('--cloud-port <n>', 'with --cloud: its port (0: pick a free one)', '0')
    .option('--spec <file>', 'instead: write a fleetlab/test spec that starts a device from the bundle and asserts it reaches its target (edit it to what the fix must do)')
    .option('--force', 'with --spec: replace the file', false)
    .action(
      action(async (bundle: string, opts: { port: string; dataDir?: string; target: 'sim' | 'container' | 'qemu'; engine: 'sim' | 'docker'; dockerSocket: string; listenAddress: string; paused: boolean; cloud: boolean; cloudPort: string; spec?: string; force: boolean }) => {
        const { runReplay } = await import('../hil/harness/capture-command.js');
        const { spec, dataDir, port, cloud, cloudPort, ...rest } = opts;
        await runReplay({ bundle, port: parsePort('--port', port), ...rest, ...(cloud ? { cloudPort: parsePort('--cloud-port', cloudPort) } : {}), ...(dataDir ? { dataDir } : {}), ...(spec ? { spec } : {}) });
      }),
    );

  program
    .command('bundle')
    .description('Read capture bundles')
    .command('show <bundle>')
    .description('What the captured device was running, what it wanted, what it waited for, the last errors in its log, and what the capture could not read')
    .option('--html [file]', 'instead: draw the bundle on a device timeline page (journal, container events, state at capture), written to file (default <bundle>.timeline.html)')
    .action(
      action(async (bundle: string, opts: { html?: string | true }) => {
        const { runBundleShow } = await import('../hil/harness/capture-command.js');
        await runBundleShow(bundle, opts.html === undefined ? {} : { html: opts.html });
      }),
    );
}
