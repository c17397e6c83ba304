/**
 * The `fleetlab` command. Each subcommand parses its flags and hands a plain options object
 * to a library function; nothing here holds state.
 */
import { Command, Option } from 'commander';
import { errorText, isFleetlabError } from '../errors.js';
import { describeSettings, flagName, loadConfig, settings, type SupervisorConfig } from '../supervisor/config.js';

/** Runs a subcommand; any error ends the process with one readable line, not a stack. */
function action<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      console.error(`fleetlab: ${isFleetlabError(err) ? err.message : errorText(err)}`);
      process.exit(1);
    }
  };
}

const program = new Command('fleetlab').description('Device supervisor, cloud API and HIL harness for Linux boards');

const supervisor = program
  .command('supervisor')
  .description('Run the device supervisor (the device API on port 48484)')
  .option('--config <file>', 'JSON config file with any of the settings below')
  .addHelpText('after', `\nSettings (flag, environment variable, default, meaning):\n${describeSettings()}\n\nPrecedence: flag > environment > config file > default.`);
for (const s of settings) {
  const flag = s.kind === 'boolean' ? `${flagName(s.key)} [bool]` : `${flagName(s.key)} <value>`;
  supervisor.addOption(new Option(flag, s.description).hideHelp());
}
supervisor.action(
  action(async (opts: Record<string, unknown>) => {
    const flags: Partial<Record<keyof SupervisorConfig, unknown>> = {};
    for (const s of settings) if (opts[s.key] !== undefined) flags[s.key] = opts[s.key] === true ? 'true' : opts[s.key];
    const config = loadConfig({ file: opts.config as string | undefined, env: process.env, flags });
    const { runSupervisor } = await import('../supervisor/main.js');
    const { stopped } = await runSupervisor(config);
    await stopped;
  }),
);

const sim = program.command('sim').description('Simulated devices and peers');
sim
  .command('device')
  .description('Start one simulated device: the supervisor plus simulated D-Bus, GPIO and journal peers')
  .option('--port <n>', 'device API port (0: pick a free one)', '48484')
  .option('--data-dir <dir>', 'where the device keeps its state (default: a new temporary directory)')
  .addOption(new Option('--engine <kind>', 'container engine').choices(['docker']).default('docker'))
  .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
  .option('--local-mode', 'start in local mode', false)
  .option('--api-key <key>', 'device API key on first start')
  .option('--vendor <word>', 'vendor word for PLATFORM_* variables', 'platform')
  .action(
    action(async (opts: { port: string; dataDir?: string; engine: 'docker'; dockerSocket: string; localMode: boolean; apiKey?: string; vendor: string }) => {
      const port = Number(opts.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be 0..65535, got ${opts.port}`);
      const { runSimDevice } = await import('../../sim/device.js');
      await runSimDevice({ ...opts, port });
    }),
  );

const images = program.command('images').description('Local container images for tests (no registry needed)');
images
  .command('build')
  .description('Build the test images (fleetlab/test-app:1 and :2) from Debian\'s busybox-static with an engine import')
  .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
  .action(
    action(async (opts: { dockerSocket: string }) => {
      const { buildTestImages } = await import('../../sim/images/test-images.js');
      const refs = await buildTestImages(opts.dockerSocket, (e) => console.error(`${e.image}: ${e.step}`));
      for (const ref of refs) console.log(ref);
    }),
  );

await program.parseAsync(process.argv);
