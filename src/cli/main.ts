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
  .addOption(new Option('--engine <kind>', 'container engine: docker (dockerd at --docker-socket) or sim (a simulated engine of its own); default: docker when that socket exists, else sim').choices(['docker', 'sim']))
  .option('--bandwidth <bytes/s>', 'simulated engine: registry bandwidth')
  .option('--scenario <file>', 'simulated engine: fault scenario (JSON, see fixtures/scenarios/)')
  .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
  .option('--local-mode', 'start in local mode', false)
  .option('--api-key <key>', 'device API key on first start')
  .option('--vendor <word>', 'vendor word for PLATFORM_* variables', 'platform')
  .option('--listen-address <addr>', 'address the device API listens on (0.0.0.0 inside a container)', '127.0.0.1')
  .option('--cloud-url <url>', 'register with this fleetlab cloud and follow its target state')
  .option('--provisioning-key <key>', "the fleet's provisioning key (with --cloud-url)")
  .option('--poll-interval-ms <ms>', 'target state poll interval (with --cloud-url)')
  .action(
    action(async (opts: { port: string; dataDir?: string; engine?: 'docker' | 'sim'; dockerSocket: string; localMode: boolean; apiKey?: string; vendor: string; listenAddress: string; bandwidth?: string; scenario?: string; cloudUrl?: string; provisioningKey?: string; pollIntervalMs?: string }) => {
      const port = Number(opts.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be 0..65535, got ${opts.port}`);
      const { existsSync } = await import('node:fs');
      const engine = opts.engine ?? (existsSync(opts.dockerSocket) ? 'docker' : 'sim');
      const bandwidth = parseBandwidth(opts.bandwidth);
      const { runSimDevice } = await import('../../sim/device.js');
      const { bandwidth: _b, scenario, cloudUrl, provisioningKey, pollIntervalMs, ...rest } = opts;
      if (cloudUrl && !provisioningKey) throw new Error('--cloud-url needs --provisioning-key (create one with POST /api-key/application/<fleet id>/provisioning)');
      const poll = pollIntervalMs === undefined ? undefined : Number(pollIntervalMs);
      if (poll !== undefined && (!Number.isInteger(poll) || poll < 1000)) throw new Error(`--poll-interval-ms must be an integer of at least 1000, got ${pollIntervalMs}`);
      const cloud = cloudUrl ? { url: cloudUrl, provisioningKey: provisioningKey!, ...(poll ? { pollIntervalMs: poll } : {}) } : undefined;
      await runSimDevice({ ...rest, engine, port, ...(bandwidth ? { bandwidth } : {}), ...(scenario ? { scenario } : {}), ...(cloud ? { cloud } : {}) });
    }),
  );

sim
  .command('stack')
  .description('A fleetlab cloud (SQLite) and one simulated device registered to its fleet "demo" (what npm start runs)')
  .option('--port <n>', 'device API port (0: pick a free one)', '48484')
  .option('--cloud-port <n>', 'cloud API port (0: pick a free one)', '48400')
  .addOption(new Option('--engine <kind>', 'container engine of the device: docker or sim; default: docker when its socket exists, else sim').choices(['docker', 'sim']))
  .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
  .option('--poll-interval-ms <ms>', 'how often the device polls its target state', '10000')
  .action(
    action(async (opts: { port: string; cloudPort: string; engine?: 'docker' | 'sim'; dockerSocket: string; pollIntervalMs: string }) => {
      const port = (flag: string, raw: string) => {
        const n = Number(raw);
        if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`${flag} must be 0..65535, got ${raw}`);
        return n;
      };
      const poll = Number(opts.pollIntervalMs);
      if (!Number.isInteger(poll) || poll < 1000) throw new Error(`--poll-interval-ms must be an integer of at least 1000, got ${opts.pollIntervalMs}`);
      const { existsSync } = await import('node:fs');
      const engine = opts.engine ?? (existsSync(opts.dockerSocket) ? 'docker' : 'sim');
      const { runStack } = await import('../../sim/stack.js');
      await runStack({ devicePort: port('--port', opts.port), cloudPort: port('--cloud-port', opts.cloudPort), engine, dockerSocket: opts.dockerSocket, pollIntervalMs: poll });
    }),
  );

/** `--bandwidth` of the simulated engine: a positive integer of bytes/s. */
function parseBandwidth(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--bandwidth must be a positive integer (bytes/s), got ${raw}`);
  return n;
}

sim
  .command('engine')
  .description('Run the simulated Docker Engine alone (Engine API on a unix socket; try DOCKER_HOST=unix://PATH docker ps)')
  .requiredOption('--socket <path>', 'unix socket to serve the Engine API on')
  .option('--data-dir <dir>', 'where the engine keeps images, containers, volumes (default: a new temporary directory)')
  .option('--bandwidth <bytes/s>', 'registry bandwidth')
  .option('--scenario <file>', 'fault scenario (JSON, see fixtures/scenarios/)')
  .action(
    action(async (opts: { socket: string; dataDir?: string; bandwidth?: string; scenario?: string }) => {
      const bandwidth = parseBandwidth(opts.bandwidth);
      const { runSimEngine } = await import('../../sim/engine/run.js');
      await runSimEngine({ socket: opts.socket, ...(opts.dataDir ? { dataDir: opts.dataDir } : {}), ...(bandwidth ? { bandwidth } : {}), ...(opts.scenario ? { scenario: opts.scenario } : {}) });
    }),
  );

program
  .command('cloud')
  .description('Run the cloud API (OData v6 over SQLite, or PostgreSQL with --database)')
  .option('--port <n>', 'port to listen on (0: pick a free one)', '8080')
  .option('--host <addr>', 'address to listen on', '127.0.0.1')
  .option('--data-dir <dir>', 'SQLite database and admin key file (default: $XDG_DATA_HOME/fleetlab/cloud or ~/.local/share/fleetlab/cloud)')
  .option('--database <url>', 'postgres://user@host:port/db (default: SQLite in the data directory)')
  .option('--admin-key <key>', 'admin API key to create or add (default: generated on first start)')
  .action(
    action(async (opts: { port: string; host: string; dataDir?: string; database?: string; adminKey?: string }) => {
      const port = Number(opts.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be 0..65535, got ${opts.port}`);
      const { runCloud } = await import('../cloud/main.js');
      const { stopped } = await runCloud({ ...opts, port });
      await stopped;
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

images
  .command('build-device')
  .description('Build the HIL container target\'s image fleetlab/device-sim:<hash> (debootstrap base, cached by its inputs, plus the compiled app)')
  .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
  .option('--force', 'rebuild even when the tags exist', false)
  .action(
    action(async (opts: { dockerSocket: string; force: boolean }) => {
      const { buildDeviceImage } = await import('../../hil/targets/container-image.js');
      const { fileURLToPath } = await import('node:url');
      const repoRoot = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? '../..' : '../../..', import.meta.url));
      const image = await buildDeviceImage({
        repoRoot,
        dockerSocket: opts.dockerSocket,
        force: opts.force,
        progress: (e) => console.error(`[${(e.elapsedMs / 1000).toFixed(1)} s] ${e.stage}: ${e.detail}`),
      });
      console.log(image.ref);
    }),
  );

await program.parseAsync(process.argv);
