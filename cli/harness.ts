/** `fleetlab init`, `test` and `deploy`: what a project using fleetlab runs on its app. */
import { Option, type Command } from 'commander';
import { action } from '../src/command/action.js';
import { UsageError } from '../src/command/usage-hint.js';
import { acceptedRange } from '../src/supervisor/versions.js';
import { checkSupervisorVersion } from './options.js';

export function addHarnessCommands(program: Command): void {
  program
    .command('init')
    .description('Set up this directory for fleetlab test: a config for your compose file, an example spec (and an example app when there is no compose file), and the install-script approvals fleetlab needs in package.json')
    .option('--force', 'overwrite files fleetlab init wrote before', false)
    .action(
      action(async (opts: { force: boolean }) => {
        const { initProject } = await import('../hil/harness/init.js');
        await initProject({ dir: process.cwd(), force: opts.force, log: (line) => console.log(`fleetlab init: ${line}`) });
      }),
    );

  program
    .command('test')
    .description('Run your specs (./fleetlab, see fleetlab.config.ts) on a device of a target with Playwright Test; other arguments go to Playwright')
    .addOption(new Option('--target <name>', 'where the device under test runs').choices(['sim', 'container', 'qemu', 'board']).default('sim'))
    .option('--repeat <n>', 'run every test n times (flakes show in the report)')
    .option('--shard <i/n>', "run this machine's share i of n (CI machines split a suite)")
    .option('--lab <file>', 'with --target board: each worker leases a board of its own from this lab file (fleetlab.lab.yaml), waiting in its queue when all are busy')
    .option('--tag <tag>', 'with --lab: only boards with this tag (repeat for several)', (v: string, all: string[]) => [...all, v], [] as string[])
    .option('--flash-image <file>', 'with --target qemu: boot this card image (fleetlab card build --board rpi4) on QEMU virt, provisioned through its fleetlab.txt')
    .option('--supervisor-version <X.Y.Z>', `the devices answer as this upstream supervisor version (${acceptedRange()}), over fleetlab.config's supervisorVersion; tests marked since() a newer one skip`)
    .argument('[playwright-args...]', 'passed to Playwright Test (a spec file, --grep, --reporter, ...)')
    .allowUnknownOption()
    .action(
      action(async (playwrightArgs: string[], opts: { target: string; repeat?: string; shard?: string; lab?: string; tag: string[]; flashImage?: string; supervisorVersion?: string }) => {
        checkSupervisorVersion('--supervisor-version', opts.supervisorVersion);
        const { runTests } = await import('../hil/harness/run.js');
        if (opts.tag.length && !opts.lab) throw new UsageError('--tag picks lab boards: give --lab <file> with it');
        const code = await runTests({
          cwd: process.cwd(),
          target: opts.target,
          ...(opts.lab ? { lab: { file: opts.lab, tags: opts.tag } } : {}),
          ...(opts.flashImage ? { flashImage: opts.flashImage } : {}),
          ...(opts.supervisorVersion !== undefined ? { supervisorVersion: opts.supervisorVersion } : {}),
          ...(opts.repeat !== undefined ? { repeat: Number(opts.repeat) } : {}),
          ...(opts.shard !== undefined ? { shard: opts.shard } : {}),
          playwrightArgs,
        });
        process.exitCode = code;
      }),
    );

  program
    .command('deploy <compose>')
    .description('Build a compose project as a release and put it on a device in local mode (--device) or on a fleet of a fleetlab cloud (--fleet)')
    .option('--device <url>', 'a device API in local mode, e.g. http://127.0.0.1:48484')
    .option('--fleet <name>', 'a fleet (name or id) of the cloud at --cloud')
    .option('--cloud <url>', 'the fleetlab cloud (with --fleet)')
    .option('--api-key <key>', "the device's key (--device) or a cloud key that may write the fleet (--fleet)")
    .option('--env <KEY=VALUE...>', 'environment for every service (--device)', [])
    .option('--ignore-key <key...>', "a compose key fleetlab refuses that the app can run without (as ignoreComposeKeys in fleetlab.config): left out, with a warning", [])
    .option('--docker-socket <path>', 'the engine to build in: the one the devices use (without --registry)', '/var/run/docker.sock')
    .option('--registry <host:port>', 'push the images there and have the devices pull them (fleetlab registry serves one)')
    .option('--arch <arch>', 'build for the boards\' architecture in a private build engine (arm64; needs --registry and root)')
    .option('--no-wait', 'return once the release is handed over')
    .option('--timeout <s>', 'how long to wait for the release to run', '180')
    .action(
      action(async (compose: string, opts: { device?: string; fleet?: string; cloud?: string; apiKey?: string; env: string[]; ignoreKey: string[]; dockerSocket: string; registry?: string; arch?: string; wait: boolean; timeout: string }) => {
        const timeout = Number(opts.timeout);
        if (!Number.isFinite(timeout) || timeout <= 0) throw new UsageError(`--timeout must be a positive number of seconds, got ${opts.timeout}`);
        if (opts.arch !== undefined && opts.arch !== 'arm64') throw new UsageError(`--arch must be arm64 (the boards fleetlab builds for), not ${JSON.stringify(opts.arch)}`);
        const { parseEnvFlags, runDeploy } = await import('../hil/harness/deploy-command.js');
        await runDeploy({
          compose,
          ...(opts.device ? { device: opts.device } : {}),
          ...(opts.fleet ? { fleet: opts.fleet } : {}),
          ...(opts.cloud ? { cloud: opts.cloud } : {}),
          ...(opts.apiKey ? { apiKey: opts.apiKey } : {}),
          dockerSocket: opts.dockerSocket,
          ...(opts.registry ? { registry: opts.registry } : {}),
          ...(opts.arch ? { arch: 'arm64' as const } : {}),
          env: parseEnvFlags(opts.env),
          ignoreKeys: opts.ignoreKey,
          wait: opts.wait,
          timeoutMs: timeout * 1000,
          log: (line) => console.error(`fleetlab deploy: ${line}`),
        });
      }),
    );
}
