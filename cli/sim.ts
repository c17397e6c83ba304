/**
 * `fleetlab sim`: simulated devices, stacks, fleets and engines. `sim device` is what the
 * container target's image runs, from cli/, src/ and sim/ alone.
 */
import { isIP } from 'node:net';
import { Option, type Command } from 'commander';
import { action } from '../src/command/action.js';
import { UsageError } from '../src/command/usage-hint.js';
import { checkSupervisorVersion, parsePort } from './options.js';
import { acceptedRange } from '../src/supervisor/versions.js';

export function addSimCommands(program: Command): void {
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
    .option('--supervisor-version <X.Y.Z>', `answer as this upstream supervisor version, ${acceptedRange()}: only the endpoints and behaviours it had (the spec's Versioning table); default: fleetlab's own, every endpoint`)
    .option('--listen-address <addr>', 'address the device API listens on (0.0.0.0 inside a container)', '127.0.0.1')
    .option('--publish-address <addr>', 'host address the apps\' published ports bind to (default: one of the device\'s own in 127.64.0.0/10, so devices on one engine never collide; "": as the compose file says)')
    .option('--cloud-url <url>', 'register with this fleetlab cloud and follow its target state')
    .option('--provisioning-key <key>', "the fleet's provisioning key (with --cloud-url)")
    .option('--poll-interval-ms <ms>', 'target state poll interval (with --cloud-url)')
    .option('--clock-offset-ms <ms>', "the supervisor's wall clock this far off this host's, ahead (negative: behind); what a replay of a device with a wrong clock uses")
    .option('--device-container <name>', "engine docker: the container of that engine this device runs in (the HIL container target); the supervisor joins its supervisor network from it, and it is the device's host network (default: a host-network container of the device's own)")
    .action(
      action(async (opts: { port: string; dataDir?: string; engine?: 'docker' | 'sim'; dockerSocket: string; localMode: boolean; apiKey?: string; vendor: string; deviceType?: string; supervisorVersion?: string; listenAddress: string; publishAddress?: string; bandwidth?: string; scenario?: string; cloudUrl?: string; provisioningKey?: string; pollIntervalMs?: string; clockOffsetMs?: string; deviceContainer?: string }) => {
        const port = parsePort('--port', opts.port);
        checkSupervisorVersion('--supervisor-version', opts.supervisorVersion);
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
    .option('--supervisor-version <X.Y.Z>', `the device answers as this upstream supervisor version, ${acceptedRange()}; default: fleetlab's own`)
    .action(
      action(async (opts: { port: string; cloudPort: string; engine?: 'docker' | 'sim'; dockerSocket: string; pollIntervalMs: string; stateDir?: string; supervisorVersion?: string }) => {
        checkSupervisorVersion('--supervisor-version', opts.supervisorVersion);
        const poll = Number(opts.pollIntervalMs);
        if (!Number.isInteger(poll) || poll < 1000) throw new UsageError(`--poll-interval-ms must be an integer of at least 1000, got ${opts.pollIntervalMs}`);
        const { existsSync } = await import('node:fs');
        const engine = opts.engine ?? (existsSync(opts.dockerSocket) ? 'docker' : 'sim');
        const { runStack } = await import('../sim/stack.js');
        const { defaultStackStateDir } = await import('../sim/stack-runs.js');
        const { resolve } = await import('node:path');
        const stateDir = resolve(opts.stateDir ?? defaultStackStateDir());
        await runStack({ devicePort: parsePort('--port', opts.port), cloudPort: parsePort('--cloud-port', opts.cloudPort), engine, dockerSocket: opts.dockerSocket, pollIntervalMs: poll, stateDir, ...(opts.supervisorVersion ? { supervisorVersion: opts.supervisorVersion } : {}) });
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
}

/** `--bandwidth` of the simulated engine: a positive integer of bytes/s. */
function parseBandwidth(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`--bandwidth must be a positive integer (bytes/s), got ${raw}`);
  return n;
}
