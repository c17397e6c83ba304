/**
 * The `fleetlab` command: the top floor, which may import every room below it (src, sim,
 * hil, qemu) and which nothing imports; bin/fleetlab.js only starts it. Each subcommand parses its flags and hands a plain options object
 * to a library function; nothing here holds state.
 */
import { isIP } from 'node:net';
import { join } from 'node:path';
import { Command, Option } from 'commander';
import { action } from '../src/command/action.js';
import { addSupervisorCommand } from '../src/supervisor/command.js';
import { pointUsageErrorsAtHelp, UsageError } from '../src/command/usage-hint.js';
import { errorText } from '../src/errors.js';
import { fleetlabRoot } from '../src/package-root.js';
import { requireNativeModules, type NativeModule } from '../src/native-modules.js';

const program = new Command('fleetlab').description('Device supervisor, cloud API and HIL harness for Linux boards');

/**
 * The native addons each command loads, checked before it runs: an addon npm left unbuilt is
 * one sentence naming it and the fix, not a loader's list of binding paths. (`test` checks
 * what its target needs itself.)
 */
const NATIVE_NEEDS: Record<string, NativeModule[]> = {
  supervisor: ['epoll'],
  'sim device': ['epoll'],
  'sim stack': ['epoll', 'better-sqlite3'],
  cloud: ['better-sqlite3'],
  // The lease store of a lab file is SQLite unless it names PostgreSQL.
  'lab status': ['better-sqlite3'],
  'lab log': ['better-sqlite3'],
  'lab release': ['better-sqlite3'],
  'lab run': ['better-sqlite3'],
};
program.hook('preAction', (_root, command) => {
  const name = [command.parent?.parent ? command.parent.name() : '', command.name()].filter(Boolean).join(' ');
  const needs = NATIVE_NEEDS[name];
  if (!needs) return;
  try {
    requireNativeModules(needs);
  } catch (err) {
    console.error(`fleetlab: ${errorText(err)}`);
    process.exit(1);
  }
});

addSupervisorCommand(program);

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
  .option('--device-type <slug>', 'the device type the supervisor reports (default: its own, raspberrypi3)')
  .option('--listen-address <addr>', 'address the device API listens on (0.0.0.0 inside a container)', '127.0.0.1')
  .option('--publish-address <addr>', 'host address the apps\' published ports bind to (default: one of the device\'s own in 127.64.0.0/10, so devices on one engine never collide; "": as the compose file says)')
  .option('--cloud-url <url>', 'register with this fleetlab cloud and follow its target state')
  .option('--provisioning-key <key>', "the fleet's provisioning key (with --cloud-url)")
  .option('--poll-interval-ms <ms>', 'target state poll interval (with --cloud-url)')
  .option('--clock-offset-ms <ms>', "the supervisor's wall clock this far off this host's, ahead (negative: behind); what a replay of a device with a wrong clock uses")
  .option('--device-container <name>', "engine docker: the container of that engine this device runs in (the HIL container target); the supervisor joins its supervisor network from it, and it is the device's host network (default: a host-network container of the device's own)")
  .action(
    action(async (opts: { port: string; dataDir?: string; engine?: 'docker' | 'sim'; dockerSocket: string; localMode: boolean; apiKey?: string; vendor: string; deviceType?: string; listenAddress: string; publishAddress?: string; bandwidth?: string; scenario?: string; cloudUrl?: string; provisioningKey?: string; pollIntervalMs?: string; clockOffsetMs?: string; deviceContainer?: string }) => {
      const port = parsePort('--port', opts.port);
      const { existsSync } = await import('node:fs');
      const engine = opts.engine ?? (existsSync(opts.dockerSocket) ? 'docker' : 'sim');
      const bandwidth = parseBandwidth(opts.bandwidth);
      const { runSimDevice } = await import('../sim/device.js');
      const { bandwidth: _b, scenario, cloudUrl, provisioningKey, pollIntervalMs, clockOffsetMs, ...rest } = opts;
      const offset = clockOffsetMs === undefined ? undefined : Number(clockOffsetMs);
      if (offset !== undefined && (!Number.isInteger(offset) || Math.abs(offset) > 100 * 365 * 86_400_000)) throw new UsageError(`--clock-offset-ms must be a whole number of milliseconds (within a century), got ${clockOffsetMs}`);
      if (cloudUrl && !provisioningKey) throw new UsageError('--cloud-url needs --provisioning-key (create one with POST /api-key/application/<fleet id>/provisioning)');
      if (opts.publishAddress && !isIP(opts.publishAddress)) throw new UsageError(`--publish-address must be an IPv4 or IPv6 address (or "" for as the compose file says), got ${JSON.stringify(opts.publishAddress)}`);
      const poll = pollIntervalMs === undefined ? undefined : Number(pollIntervalMs);
      if (poll !== undefined && (!Number.isInteger(poll) || poll < 1000)) throw new UsageError(`--poll-interval-ms must be an integer of at least 1000, got ${pollIntervalMs}`);
      const cloud = cloudUrl ? { url: cloudUrl, provisioningKey: provisioningKey!, ...(poll ? { pollIntervalMs: poll } : {}) } : undefined;
      await runSimDevice({ ...rest, engine, port, ...(bandwidth ? { bandwidth } : {}), ...(scenario ? { scenario } : {}), ...(cloud ? { cloud } : {}), ...(offset ? { clockOffsetMs: offset } : {}) });
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
  .option('--state-dir <dir>', 'where runs keep their state, one directory each, removed at stop; the next start reaps what a run killed with -9 left there (default: $XDG_STATE_HOME/fleetlab/stack or ~/.local/state/fleetlab/stack)')
  .action(
    action(async (opts: { port: string; cloudPort: string; engine?: 'docker' | 'sim'; dockerSocket: string; pollIntervalMs: string; stateDir?: string }) => {
      const poll = Number(opts.pollIntervalMs);
      if (!Number.isInteger(poll) || poll < 1000) throw new UsageError(`--poll-interval-ms must be an integer of at least 1000, got ${opts.pollIntervalMs}`);
      const { existsSync } = await import('node:fs');
      const engine = opts.engine ?? (existsSync(opts.dockerSocket) ? 'docker' : 'sim');
      const { runStack } = await import('../sim/stack.js');
      const { defaultStackStateDir } = await import('../sim/stack-runs.js');
      const { resolve } = await import('node:path');
      const stateDir = resolve(opts.stateDir ?? defaultStackStateDir());
      await runStack({ devicePort: parsePort('--port', opts.port), cloudPort: parsePort('--cloud-port', opts.cloudPort), engine, dockerSocket: opts.dockerSocket, pollIntervalMs: poll, stateDir });
    }),
  );

sim
  .command('fleet')
  .description("Many virtual devices in this process (or worker processes), each the supervisor's real cloud logic over its own simulated engine, registered to a fleet of a fleetlab cloud; a live line shows where they are. Ctrl-C stops them")
  .requiredOption('--devices <n>', 'devices in the whole fleet (every shard together)')
  .requiredOption('--cloud <url>', 'the fleetlab cloud, e.g. http://127.0.0.1:48400')
  .option('--fleet <name>', "the fleet (name or id) to register to, with --api-key (which makes a provisioning key)")
  .option('--api-key <key>', 'a cloud key that may write the fleet (npm start prints the admin key)')
  .option('--provisioning-key <key>', "the fleet's provisioning key, instead of --fleet and --api-key")
  .option('--shard <i/n>', 'run only shard i of n of the devices (several machines run one fleet)')
  .option('--fault <kind:percent%>', 'a share of the fleet with a fault: partition (cut from the cloud from --partition-after to --heal-after), disk-full, pull-fails, clock-skew (the device wall clock an hour to 30 days off); repeat for several', (v: string, all: string[]) => [...all, v], [] as string[])
  .option('--seed <n>', 'which devices get each fault: the same seed picks the same ones', '1')
  .option('--partition-after <s>', 'cut the partitioned devices from the cloud this many seconds after the start (default: from the start)')
  .option('--heal-after <s>', 'give partitioned devices their link back this many seconds after the start')
  .option('--poll-interval-ms <ms>', 'how often each device polls its target state', '60000')
  .option('--start-rate <n>', 'devices started per second (default: the fleet comes up over one poll interval, at least 50 a second)')
  .option('--data-dir <dir>', 'keep the devices\' state here (default: a temporary directory, removed at the stop)')
  .option('--every <s>', 'seconds between live lines', '5')
  .option('--workers <n>', "processes to run the devices in (default: as many as the open-file limit needs; a device holds two connections)")
  .action(
    action(async (opts: { devices: string; cloud: string; fleet?: string; apiKey?: string; provisioningKey?: string; shard?: string; fault: string[]; seed: string; partitionAfter?: string; healAfter?: string; pollIntervalMs: string; startRate?: string; dataDir?: string; every: string; workers?: string }) => {
      const devices = Number(opts.devices);
      if (!Number.isInteger(devices) || devices < 1 || devices > 100_000) throw new UsageError(`--devices must be a whole number from 1 to 100000, got ${opts.devices}`);
      if (!opts.provisioningKey && !(opts.fleet && opts.apiKey)) throw new UsageError('give --fleet and --api-key (a provisioning key is made for the fleet), or --provisioning-key');
      const poll = Number(opts.pollIntervalMs);
      if (!Number.isInteger(poll) || poll < 1000) throw new UsageError(`--poll-interval-ms must be an integer of at least 1000, got ${opts.pollIntervalMs}`);
      const seed = Number(opts.seed);
      if (!Number.isInteger(seed)) throw new UsageError(`--seed must be a whole number, got ${opts.seed}`);
      const positive = (flag: string, raw: string | undefined) => {
        if (raw === undefined) return undefined;
        const n = Number(raw);
        if (!(n > 0) || !Number.isFinite(n)) throw new UsageError(`${flag} must be a positive number, got ${raw}`);
        return n;
      };
      const { parseFault, shardRange } = await import('../sim/fleet/fault-plan.js');
      const faults = opts.fault.map((f) => {
        try {
          return parseFault(f);
        } catch (err) {
          throw new UsageError((err as Error).message);
        }
      });
      try {
        shardRange(devices, opts.shard);
      } catch (err) {
        throw new UsageError((err as Error).message);
      }
      const { runFleet } = await import('../sim/fleet/run.js');
      const healAfterS = positive('--heal-after', opts.healAfter);
      const partitionAfterS = positive('--partition-after', opts.partitionAfter);
      const startRate = positive('--start-rate', opts.startRate);
      const workers = positive('--workers', opts.workers);
      if (workers !== undefined && !Number.isInteger(workers)) throw new UsageError(`--workers must be a whole number, got ${opts.workers}`);
      await runFleet({
        devices,
        cloud: opts.cloud,
        ...(opts.provisioningKey ? { provisioningKey: opts.provisioningKey } : {}),
        ...(opts.fleet ? { fleet: opts.fleet } : {}),
        ...(opts.apiKey ? { apiKey: opts.apiKey } : {}),
        ...(opts.shard ? { shard: opts.shard } : {}),
        faults,
        seed,
        pollIntervalMs: poll,
        ...(startRate ? { startRate } : {}),
        ...(opts.dataDir ? { dataDir: opts.dataDir } : {}),
        ...(healAfterS ? { healAfterS } : {}),
        ...(partitionAfterS ? { partitionAfterS } : {}),
        everyS: positive('--every', opts.every)!,
        ...(workers ? { workers } : {}),
      });
    }),
  );

/** A port flag: 0 (pick a free one) to 65535. */
function parsePort(flag: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new UsageError(`${flag} must be 0..65535, got ${raw}`);
  return n;
}

/** `--bandwidth` of the simulated engine: a positive integer of bytes/s. */
function parseBandwidth(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`--bandwidth must be a positive integer (bytes/s), got ${raw}`);
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
      const { runSimEngine } = await import('../sim/engine/run.js');
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
  .option('--db-pool <n>', 'PostgreSQL connections this process opens (default: 10); replicas x this must stay under the server\'s max_connections')
  .action(
    action(async (opts: { port: string; host: string; dataDir?: string; database?: string; adminKey?: string; dbPool?: string }) => {
      const port = parsePort('--port', opts.port);
      const { databaseUrlProblem, runCloud } = await import('../src/cloud/main.js');
      const problem = opts.database === undefined ? null : databaseUrlProblem(opts.database);
      if (problem) throw new UsageError(problem);
      const dbPool = opts.dbPool === undefined ? undefined : Number(opts.dbPool);
      if (dbPool !== undefined && (!Number.isInteger(dbPool) || dbPool < 1 || dbPool > 1000)) throw new UsageError(`--db-pool must be a whole number of connections, 1..1000, got ${opts.dbPool}`);
      if (dbPool !== undefined && !opts.database?.startsWith('postgres')) throw new UsageError('--db-pool sizes the PostgreSQL connection pool: it needs --database postgres://...');
      const { stopped } = await runCloud({ ...opts, port, dbPool });
      await stopped;
    }),
  );

program
  .command('registry')
  .description("Serve a container registry on 127.0.0.1 (Debian's docker-registry) for fleetlab deploy --registry; boards reach it through SSH or your network. Ctrl-C stops it")
  .option('--port <port>', 'port to listen on (0: a free one)', '5000')
  .option('--dir <dir>', 'where it stores images (default: <cache>/registry)')
  .action(
    action(async (opts: { port: string; dir?: string }) => {
      const { startRegistry } = await import('../hil/release/registry.js');
      const { cacheRoot } = await import('../device-image/tools.js');
      const dir = opts.dir ?? join(cacheRoot(), 'registry');
      const port = parsePort('--port', opts.port);
      const registry = await startRegistry({ dir, ...(port ? { port } : {}) });
      console.log(`registry on ${registry.host} (images in ${dir}, log ${registry.logPath}); deploy to it with fleetlab deploy --registry ${registry.host}; Ctrl-C stops it`);
      const { untilStopped } = await import('../src/stop-signals.js');
      await untilStopped(() => registry.close()).done;
    }),
  );

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
  .option('--flash-image <file>', 'with --target qemu: boot this card image (fleetlab image build --board rpi4) on QEMU virt, provisioned through its fleetlab.txt')
  .argument('[playwright-args...]', 'passed to Playwright Test (a spec file, --grep, --reporter, ...)')
  .allowUnknownOption()
  .action(
    action(async (playwrightArgs: string[], opts: { target: string; repeat?: string; shard?: string; lab?: string; tag: string[]; flashImage?: string }) => {
      const { runTests } = await import('../hil/harness/run.js');
      if (opts.tag.length && !opts.lab) throw new UsageError('--tag picks lab boards: give --lab <file> with it');
      const code = await runTests({
        cwd: process.cwd(),
        target: opts.target,
        ...(opts.lab ? { lab: { file: opts.lab, tags: opts.tag } } : {}),
        ...(opts.flashImage ? { flashImage: opts.flashImage } : {}),
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
      const { parseJournalEntries, parseVolumeBytes, runCapture } = await import('../hil/capture/capture-command.js');
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
      const { runReplay } = await import('../hil/capture/capture-command.js');
      const { spec, dataDir, port, cloud, cloudPort, ...rest } = opts;
      await runReplay({ bundle, port: parsePort('--port', port), ...rest, ...(cloud ? { cloudPort: parsePort('--cloud-port', cloudPort) } : {}), ...(dataDir ? { dataDir } : {}), ...(spec ? { spec } : {}) });
    }),
  );

program
  .command('bundle')
  .description('Read capture bundles')
  .command('show <bundle>')
  .description('What the captured device was running, what it wanted, what it waited for, the last errors in its log, and what the capture could not read')
  .action(
    action(async (bundle: string) => {
      const { runBundleShow } = await import('../hil/capture/capture-command.js');
      await runBundleShow(bundle);
    }),
  );

const images = program.command('images').description('Local container images for tests (no registry needed)');
images
  .command('build')
  .description('Build the test images (fleetlab/test-app:1 and :2) from Debian\'s busybox-static with an engine import')
  .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
  .action(
    action(async (opts: { dockerSocket: string }) => {
      const { buildTestImages } = await import('../sim/images/test-images.js');
      const refs = await buildTestImages(opts.dockerSocket, (e) => console.error(`${e.image}: ${e.step}`));
      for (const ref of refs) console.log(ref);
    }),
  );

images
  .command('base')
  .description("Make fleetlab/busybox:latest (Debian trixie's busybox with every applet and the C library it links, CMD sh), a base image for your Dockerfiles where no registry is reachable; replaces one of an older recipe")
  .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
  .action(
    action(async (opts: { dockerSocket: string }) => {
      const { BASE_IMAGE, ensureBaseImage } = await import('../sim/images/base-image.js');
      const { cacheRoot } = await import('../device-image/tools.js');
      const imported = await ensureBaseImage(opts.dockerSocket, (e) => console.error(`${e.image}: ${e.step}`), { cacheDir: cacheRoot() });
      console.log(imported ? BASE_IMAGE : `${BASE_IMAGE} (already there)`);
    }),
  );

images
  .command('build-device')
  .description('Build the HIL container target\'s image fleetlab/device-sim:<hash> (debootstrap base, cached by its inputs, plus the compiled app)')
  .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
  .option('--force', 'rebuild even when the tags exist', false)
  .action(
    action(async (opts: { dockerSocket: string; force: boolean }) => {
      const { buildDeviceImage } = await import('../hil/targets/container-image.js');
      const repoRoot = fleetlabRoot(import.meta.url);
      const image = await buildDeviceImage({
        repoRoot,
        dockerSocket: opts.dockerSocket,
        force: opts.force,
        progress: (e) => console.error(`[${(e.elapsedMs / 1000).toFixed(1)} s] ${e.stage}: ${e.detail}`),
      });
      console.log(image.ref);
    }),
  );

const lab = program.command('lab').description('A lab of boards shared by test runs (fleetlab.lab.yaml): who holds which board, runs on a leased board, leases that expire');
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
lab
  .command('status')
  .description('Each board of the lab: reachable over SSH, its supervisor, and who holds it until when')
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
  .description('Put a board back in the lab after it was marked offline (it did not come back after its power control); logged')
  .addOption(labFileOption())
  .action(
    action(async (board: string, opts: { lab: string }) => {
      const { labOnline } = await import('../hil/lab/lab-command.js');
      console.log(await withLab(opts.lab, (open) => labOnline(open, board)));
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

const board = program.command('board').description('A Raspberry Pi (or any Debian arm64 board) over SSH: put the supervisor on it as a systemd service, or take it off');
const identityOption = () => new Option('--identity <file>', 'the SSH private key the board accepts (default ~/.ssh/id_ed25519, id_ecdsa or id_rsa)');
board
  .command('install <ssh-url>')
  .description('Install Node 24, the supervisor, its config and systemd unit on the board at ssh://user@host[:port] (root, or a user with passwordless sudo), adding docker.io and redsocks with its apt when missing; idempotent; prints each step')
  .addOption(identityOption())
  .option('--upgrade', 'replace a supervisor of another build, keeping its data (device identity, cloud link)', false)
  .option('--led <line>', 'the LED line "<chip label>:<offset>" (or a GPIO number, or none); default the Raspberry Pi\'s ACT LED by model')
  .option('--no-apt', 'do not install missing packages with the board\'s apt: say what to run instead')
  .action(
    action(async (address: string, opts: { identity?: string; upgrade: boolean; led?: string; apt: boolean }) => {
      const { boardInstallCommand } = await import('../board/board-command.js');
      if (opts.led !== undefined && opts.led !== 'none') {
        const { parseLedGpio } = await import('../src/supervisor/adapters/led.js');
        try {
          parseLedGpio(opts.led);
        } catch {
          throw new UsageError(`--led must be "<chip label>:<offset>" (e.g. pinctrl-bcm2711:42), a GPIO number, or none; got ${JSON.stringify(opts.led)}`);
        }
      }
      await boardInstallCommand(address, {
        repoRoot: await repoRootOfCli(),
        upgrade: opts.upgrade,
        apt: opts.apt,
        ...(opts.identity ? { identity: opts.identity } : {}),
        ...(opts.led !== undefined ? { led: opts.led } : {}),
        progress: (line) => console.error(`fleetlab board: ${line}`),
      });
    }),
  );
board
  .command('uninstall <ssh-url>')
  .description('Remove everything fleetlab board install put on the board: the service, the supervisor\'s containers and data, the images that came after the install, the packages it added, dockerd\'s config as it was')
  .addOption(identityOption())
  .option('--keep-images', 'keep the engine images that came after the install', false)
  .option('--keep-packages', 'keep the Debian packages the install added', false)
  .action(
    action(async (address: string, opts: { identity?: string; keepImages: boolean; keepPackages: boolean }) => {
      const { boardUninstallCommand } = await import('../board/board-command.js');
      await boardUninstallCommand(address, {
        keepImages: opts.keepImages,
        keepPackages: opts.keepPackages,
        ...(opts.identity ? { identity: opts.identity } : {}),
        progress: (line) => console.error(`fleetlab board: ${line}`),
      });
    }),
  );

program
  .command('image')
  .description('Card images for Raspberry Pi boards')
  .command('build')
  .description('Build a card image to flash (dd, or the Raspberry Pi Imager\'s "Use custom"): the Pi firmware, Debian 13 arm64 and the supervisor; fleetlab.txt on its boot partition sets the board up at first boot')
  .requiredOption('--board <model>', 'rpi4 (Pi 4 B, 400, CM4) or rpi3 (Pi 3 B/B+/A+, Zero 2 W)')
  .option('--out <file>', 'where to write the image (default ./fleetlab-<board>.img)')
  .option('--suite <name>', 'Debian suite (trixie: Debian 13; bookworm: Debian 12)', 'trixie')
  .option('--mirror <url>', 'Debian mirror', 'http://deb.debian.org/debian')
  .option('--force', 'rebuild even when cached', false)
  .action(
    action(async (opts: { board: string; out?: string; suite: string; mirror: string; force: boolean }) => {
      const { flashBoard } = await import('../device-image/card-plan.js');
      const board = flashBoard(opts.board);
      const { buildFlashImage, formatBuildProgress } = await import('../device-image/card-image.js');
      const result = await buildFlashImage({
        repoRoot: await repoRootOfCli(),
        board,
        ...(opts.out ? { out: opts.out } : {}),
        suite: opts.suite,
        mirror: opts.mirror,
        force: opts.force,
        progress: (e) => console.error(formatBuildProgress(e)),
      });
      const gib = (result.manifest.layout.totalBytes / 1024 **3).toFixed(2);
      console.error(`${result.image}: ${gib} GiB, fleetlab ${result.manifest.version}, Debian ${result.manifest.suite} kernel ${result.manifest.kernelVersion}, firmware ${result.manifest.firmware}`);
      console.error('Edit fleetlab.txt on its boot partition (FLEETBOOT) after flashing: hostname, cloud_url + provisioning_key (or local mode), ssh_key.');
      console.error(`Flash: sudo dd if=${result.image} of=/dev/sdX bs=4M conv=fsync status=progress   (or Raspberry Pi Imager: Choose OS > Use custom)`);
      console.log(JSON.stringify({ event: 'built', image: result.image, board, key: result.manifest.key, sizeBytes: result.manifest.layout.totalBytes, built: result.built, totalMs: result.totalMs }));
    }),
  );

const qemu = program.command('qemu').description('The emulated Raspberry Pi: build its image, boot it');
const repoRootOfCli = async () => fleetlabRoot(import.meta.url);
qemu
  .command('build')
  .description('Build (or reuse) the Raspberry Pi 3 image from Debian arm64 packages: rootfs, kernel, Node 24, the supervisor; cached by its inputs')
  .option('--suite <name>', 'Debian suite (trixie: Debian 13; bookworm: Debian 12)', 'trixie')
  .option('--mirror <url>', 'Debian mirror', 'http://deb.debian.org/debian')
  .option('--force', 'rebuild even when cached', false)
  .option('--bare', 'the board\'s operating system without anything of fleetlab\'s: a fresh board to try `fleetlab board install` on', false)
  .action(
    action(async (opts: { suite: string; mirror: string; force: boolean; bare: boolean }) => {
      const { buildImage, formatBuildProgress } = await import('../device-image/build.js');
      const result = await buildImage({
        repoRoot: await repoRootOfCli(),
        suite: opts.suite,
        mirror: opts.mirror,
        force: opts.force,
        bare: opts.bare,
        progress: (e) => console.error(formatBuildProgress(e)),
      });
      console.log(JSON.stringify({ event: 'built', dir: result.image.dir, key: result.image.key, builtRootfs: result.builtRootfs, builtImage: result.builtImage, totalMs: result.totalMs }));
    }),
  );
qemu
  .command('payload')
  .description("Write the board's supervisor bundle and arm64 epoll addon to --out, from a checkout's sources (npm pack runs it: an installed fleetlab builds its board image from them)")
  .requiredOption('--out <dir>', 'where to write them (the package takes dist/device)')
  .action(
    action(async (opts: { out: string }) => {
      const { writePrebuiltPayload } = await import('../device-image/payload.js');
      const { NODE_PACKAGE } = await import('../device-image/recipe.js');
      const { cacheRoot } = await import('../device-image/tools.js');
      const { resolve } = await import('node:path');
      const written = await writePrebuiltPayload(await repoRootOfCli(), join(cacheRoot(), 'qemu'), NODE_PACKAGE, resolve(opts.out));
      console.error(`fleetlab qemu payload: ${written.bundle}, ${written.epollAddon} (for ${written.node})`);
    }),
  );
qemu
  .command('boot')
  .description('Boot the image (building it first if needed); prints one JSON ready line once the supervisor answers /ping; Ctrl-C powers it off')
  .addOption(new Option('--machine <kind>', 'virt (generic arm64, default: the fastest) or raspi3b (the Pi 3: its BCM2835 GPIO, device tree and USB network)').choices(['raspi3b', 'virt']).default('virt'))
  .option('--snapshot', 'throw the disk changes away at exit (default: keep them in the machine\'s overlay under the cache)', false)
  .option('--api-port <port>', 'loopback port forwarded to the device API (default: a free one)')
  .option('--ssh-port <port>', 'loopback port forwarded to SSH (default: a free one)')
  .option('--board-config <file>', 'also write a board target config for this board (FLEETLAB_BOARD_CONFIG=<file> npm run hil -- --project=board)')
  .option('--suite <name>', 'Debian suite of the image (trixie, bookworm)', 'trixie')
  .option('--bare', 'boot the bare image (qemu build --bare: no supervisor); ready once SSH answers, for `fleetlab board install`', false)
  .option('--flash-image <file>', 'boot a card image (fleetlab image build) instead: its kernel and root partition, provisioned with this harness\'s SSH key; --machine virt')
  .option('--serial-pty', 'the console on a pseudo-terminal too (serialPty in the ready line, serial in --board-config), as a lab board\'s USB serial adapter', false)
  .action(
    action(async (opts: { machine: 'raspi3b' | 'virt'; snapshot: boolean; apiPort?: string; sshPort?: string; boardConfig?: string; suite: string; bare: boolean; flashImage?: string; serialPty: boolean }) => {
      const { buildImage, formatBuildProgress } = await import('../device-image/build.js');
      const { bootBoard } = await import('../qemu/boot.js');
      const { untilStopped } = await import('../src/stop-signals.js');
      if (opts.flashImage && opts.machine !== 'virt') throw new UsageError('--flash-image boots on --machine virt (QEMU 7.2 has no Pi 4; the Pi 4 kernel and root partition run there as they are)');
      if (opts.flashImage && opts.bare) throw new UsageError('--flash-image and --bare are two different disks: give one');
      const { image } = opts.flashImage
        ? { image: await (await import('../qemu/flash-boot.js')).flashImageForQemu({ image: opts.flashImage, progress: (d) => console.error(d) }) }
        : await buildImage({
            repoRoot: await repoRootOfCli(),
            suite: opts.suite,
            bare: opts.bare,
            progress: (e) => console.error(formatBuildProgress(e)),
          });
      const port = (v: string | undefined) => (v === undefined ? undefined : Number(v));
      const { dirname } = await import('node:path');
      const ports = { ...(opts.apiPort ? { apiPort: port(opts.apiPort) } : {}), ...(opts.sshPort ? { sshPort: port(opts.sshPort) } : {}) };
      // A bare board on a throwaway disk holds nothing of a run's: it starts from its saved
      // state (seconds, saved at its first boot) rather than booting for a minute.
      const { mkdtemp, rm } = await import('node:fs/promises');
      const bareRunDir = opts.bare && opts.snapshot && opts.machine === 'virt' ? await mkdtemp(join((await import('node:os')).tmpdir(), 'fleetlab-qemu-')) : undefined;
      const { board, ready } = bareRunDir
        ? await (await import('../hil/targets/qemu-restore.js')).startBareBoard({ image, runDir: bareRunDir, consolePty: opts.serialPty, progress: (d) => console.error(d), ...ports })
        : await bootBoard({
            image,
            machine: opts.machine,
            snapshot: opts.snapshot,
            readyWhen: opts.bare ? 'ssh' : 'api',
            consolePty: opts.serialPty,
            ...ports,
            progress: (d) => console.error(d),
          });
      if (opts.boardConfig) {
        const { writeFileSync } = await import('node:fs');
        const { boardConfigFor } = await import('../qemu/board-config.js');
        // The lab's power switch for this board is QMP, driven by this same CLI.
        const self = [process.execPath, ...process.execArgv, process.argv[1]!];
        writeFileSync(opts.boardConfig, `${JSON.stringify(boardConfigFor(ready, self, image.bootDir), null, 2)}\n`);
        console.error(`board config: ${opts.boardConfig}`);
      }
      console.log(JSON.stringify(ready));
      console.error(`ssh -i ${ready.sshKey} -p ${ready.sshPort} root@127.0.0.1    # Ctrl-C here powers the board off`);
      // QEMU runs with -no-reboot: a reboot of the guest, or `qemu power cycle`, ends the
      // process and the board is powered on again here; anything else ends the command.
      const { relaunch, takePowerCycleRequest } = await import('../qemu/boot.js');
      let current = board;
      let stopping = false;
      const { done, trigger } = untilStopped(async () => {
        stopping = true;
        await current.stop();
      });
      const follow = async (): Promise<void> => {
        await current.exited;
        if (stopping) return;
        if (current.guestReset || takePowerCycleRequest(ready.qmpSocket)) {
          console.error(`board reset (${current.guestReset ? current.resetCause : 'power cycle'}): starting QEMU again`);
          current = await relaunch(current, image, dirname(ready.qmpSocket));
          return follow();
        }
        console.error(current.exitReason);
        trigger();
      };
      void follow().catch((err) => (console.error(`fleetlab: ${String(err)}`), trigger()));
      await done;
      if (bareRunDir) await rm(bareRunDir, { recursive: true, force: true });
    }),
  );

qemu
  .command('power <action>')
  .description('Power control of a running board through its QMP socket: cycle (off, then `qemu boot` powers it on again) or off')
  .requiredOption('--qmp <socket>', 'the board\'s QMP socket (qmpSocket in the ready line)')
  .action(
    action(async (what: string, opts: { qmp: string }) => {
      if (what !== 'cycle' && what !== 'off') throw new UsageError(`power action must be cycle or off, not ${JSON.stringify(what)}`);
      const { QmpClient } = await import('../qemu/qmp.js');
      // A cycle is off, then on: `qemu boot` starts QEMU again when it sees the request.
      if (what === 'cycle') (await import('../qemu/boot.js')).requestPowerCycle(opts.qmp);
      const qmp = await QmpClient.connect({ socketPath: opts.qmp });
      try {
        await qmp.execute('quit');
      } finally {
        await qmp.close().catch(() => undefined);
      }
    }),
  );

pointUsageErrorsAtHelp(program);
await program.parseAsync(process.argv);
