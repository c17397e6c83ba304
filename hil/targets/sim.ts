/**
 * The `sim` target: one simulated device (`SimDevice`) started in the harness process. The
 * supervisor runs as its own process, as on a board, with simulated peers: a private D-Bus
 * (hostname1, systemd1, login1), a sysfs GPIO tree in a private mount namespace, and a
 * journal written by journal-remote.
 *
 * "The device" for this target is the host: `exec` runs argv on the harness machine and
 * `files` reads and writes its file system (the lock root, the volumes) directly, because
 * the simulated device's files are ordinary files there.
 *
 * The container engine is `FLEETLAB_HIL_ENGINE` (`sim` or `docker`; see `defaultEngine`).
 * Specs never see the engine: they reach containers only through the device API.
 *
 * A release (`images`) is built in the host's dockerd either way. On dockerd the device finds
 * it there; on the simulated engine the device pulls it, as a board does, from a registry on
 * loopback (worker-registry.ts) that the simulated engine reads over plain HTTP.
 */
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import Docker from 'dockerode';
import { SIM_LED_CHIP, SimDevice, simDeviceFiles } from '../../sim/device.js';
import { removeDeviceLeftovers } from '../../sim/device-leftovers.js';
import { Teardown } from '../../src/teardown.js';
import { FleetlabError } from '../../src/errors.js';
import { replaySimOptions } from '../capture/replay.js';
import { httpApi } from '../lib/http.js';
import { filesBesideEngine, hostFiles, removeTree } from './engine-files.js';
import { hostShell } from './host-shell.js';
import { enginePorts } from './engine-ports.js';
import type { ApiProtocol, Capability, CommandProtocol, DevicePaths, DeviceUnderTest, FilesProtocol, ImagesProtocol, JournalProtocol, LedProtocol, NetworkProtocol, ObserveProtocol, PortsProtocol, PowerProtocol, SupervisorProtocol, TargetFacts } from '../../device-access/protocols.js';
import type { TargetDriver, TargetStartOptions } from './target-driver.js';
import { pulledFromRegistry, WorkerRegistry } from './worker-registry.js';
import { engineVolumePath } from './drivers/device-facts.js';
import { journalInDirectory } from './drivers/journal-directory.js';
import { hostObserve } from './drivers/observe-host.js';
import { login1DbusSend, login1Reboot } from './drivers/reboot-login1.js';
import { supervisorKill } from './drivers/supervisor-kill.js';
import { deadlines, SIM_TIMEOUTS } from './timeouts.js';

export type SimEngine = 'sim' | 'docker';

export interface SimTargetOptions extends TargetStartOptions {
  engine?: SimEngine;
  dockerSocket?: string;
}

const DOCKER_SOCKET = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
const TIMEOUTS = deadlines(SIM_TIMEOUTS);

/**
 * The engine the sim target runs with when `FLEETLAB_HIL_ENGINE` is not set: the simulated
 * engine (sim/engine/, its own registry with download progress, no dockerd needed).
 * `docker` runs the same specs on the real dockerd with locally built images.
 */
const DEFAULT_ENGINE: SimEngine = 'sim';

/** `FLEETLAB_HIL_ENGINE` when set, else DEFAULT_ENGINE. */
export function defaultEngine(): SimEngine {
  const env = process.env.FLEETLAB_HIL_ENGINE;
  if (env === 'sim' || env === 'docker') return env;
  if (env) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `FLEETLAB_HIL_ENGINE must be sim or docker, not ${JSON.stringify(env)}`);
  return DEFAULT_ENGINE;
}

class SimUnderTest implements DeviceUnderTest {
  readonly target = 'sim';
  readonly api: ApiProtocol;
  readonly exec: CommandProtocol;
  readonly led: LedProtocol;
  readonly power: PowerProtocol;
  readonly supervisor: SupervisorProtocol;
  readonly journal: JournalProtocol;
  readonly files: FilesProtocol;
  readonly network: NetworkProtocol;
  readonly images?: ImagesProtocol;
  readonly ports?: PortsProtocol;
  readonly paths: DevicePaths;
  readonly facts: TargetFacts;
  readonly observe: ObserveProtocol;
  #closed = false;
  /** A registry this device started for itself (the driver did not lend it one); closed with it. */
  readonly #ownRegistry: WorkerRegistry | undefined;

  constructor(
    private readonly sim: SimDevice,
    readonly capabilities: ReadonlySet<Capability>,
    engine: SimEngine,
    release: { hostDockerSocket: string; registry?: WorkerRegistry },
  ) {
    const info = sim.info();
    this.api = httpApi({
      url: info.url, apiKey: info.apiKey, uuid: info.uuid, vendor: sim.options.vendor, lockRoot: sim.lockRoot,
      hostPaths: { hostname: simDeviceFiles(info.dataDir).hostnameFile, proxyConfigDir: simDeviceFiles(info.dataDir).proxyConfigDir, bootConfig: join(info.dataDir, 'boot', 'config.txt') },
    });
    // With dockerd the test images are built locally and never pulled; the simulated engine
    // pulls from its simulated registry with progress.
    this.facts = { engine, imagesArePulled: engine === 'sim' };
    // On dockerd the device's engine is the harness's: a release built there is found as is.
    if (engine === 'docker') {
      const engineSocket = sim.options.dockerSocket;
      this.images = { prepare: async () => ({ engineSocket }) };
      this.ports = enginePorts(engineSocket, info.uuid);
    } else {
      this.#ownRegistry = release.registry ? undefined : new WorkerRegistry();
      this.images = pulledFromRegistry(release.registry ?? this.#ownRegistry!, release.hostDockerSocket);
    }
    this.exec = hostShell;
    this.paths = sim.paths;
    this.observe = hostObserve({ engineSocket: sim.options.dockerSocket, supervisorPid: async () => sim.supervisorPid, lockRoot: sim.lockRoot });
    const gpio = sim.ledGpio;
    this.led = {
      line: `gpio ${gpio} (${SIM_LED_CHIP} pin ${sim.options.ledOffset}, simulated sysfs)`,
      level: async () => sim.gpio.value(gpio),
      transitions: async (sinceMs = 0) => sim.gpio.transitions(gpio).filter((t) => t.at >= sinceMs).map((t) => ({ at: t.at, value: t.value })),
    };
    // Bounded: a device that never finishes booting fails the step instead of hanging.
    const rebooted = () =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          sim.off('reboot', done);
          reject(new FleetlabError('SUP_ERR_HOST', `the device did not reboot within ${TIMEOUTS.ready} ms; see ${sim.supervisorLog}`));
        }, TIMEOUTS.ready);
        const done = () => {
          clearTimeout(timer);
          resolve();
        };
        sim.once('reboot', done);
      });
    this.power = {
      reboot: login1Reboot({
        run: (argv) => hostShell.run(argv),
        argv: login1DbusSend(sim.bus.address),
        // The sim says when it rebooted: heard only if listened for before the call.
        watchDown: () => {
          const done = rebooted();
          done.catch(() => undefined); // awaited later; a failed dbus-send must not leave it unhandled
          return () => done;
        },
        up: () => this.api.waitReady(TIMEOUTS.ready),
      }),
      cycle: async () => {
        // No clean shutdown: the supervisor dies mid-whatever, then the device boots again.
        const pid = sim.supervisorPid;
        if (pid) process.kill(pid, 'SIGKILL');
        await sim.reboot({ powerLost: true });
        await this.api.waitReady(TIMEOUTS.ready);
      },
      off: async () => {
        await sim.powerOff({ powerLost: true });
      },
      on: async () => {
        // Booting from off is a reboot whose shutdown half finds nothing running.
        await sim.reboot();
        await this.api.waitReady(TIMEOUTS.ready);
      },
    };
    this.supervisor = supervisorKill({
      kill: async () => {
        const pid = sim.supervisorPid;
        if (!pid) throw new FleetlabError('SUP_ERR_HOST', 'supervisor.kill: the device has no supervisor running');
        process.kill(pid, 'SIGKILL');
      },
      url: info.url,
      downMs: TIMEOUTS.ready,
      waitReady: () => this.api.waitReady(TIMEOUTS.ready),
    });
    // The device's path to its cloud is a loopback link the sim holds (sim/network/).
    const link = () => {
      if (!sim.cloudLink) throw new FleetlabError('SUP_ERR_BAD_REQUEST', 'network: this device was started without a cloud (test.use({ withCloud: true }))');
      return sim.cloudLink;
    };
    this.network = {
      partition: async () => link().partition(),
      heal: async () => link().heal(),
    };
    this.journal = journalInDirectory(hostShell.run, join(info.dataDir, 'journal'));
    // Both engines keep a local volume's data in a host directory, the volume's Mountpoint;
    // the device's own engine socket says which. dockerd's is root's alone: as another user
    // the files there are reached through the engine.
    const docker = new Docker({ socketPath: sim.options.dockerSocket });
    this.files = {
      ...(engine === 'docker' ? filesBesideEngine(sim.options.dockerSocket) : hostFiles),
      volumePath: (appId: number, volume: string) => engineVolumePath(docker, info.uuid, appId, volume),
    };
  }

  supervisorLog(): Promise<string> {
    return readFile(this.sim.supervisorLog, 'utf8').catch((err) => `(no supervisor log: ${err})`);
  }

  /**
   * Stops the device and removes what it leaves behind. A device the target started made its
   * own data dir, and its stop removes that dir and the device's volumes; one started from a
   * bundle runs in the dir the replay made, which no later test reuses, so both go here.
   * Evidence for a failed test is attached before this runs; what could not be removed is
   * named in the error, after every step has run.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const { uuid, dataDir } = this.sim.info();
    const teardown = new Teardown();
    if (!this.sim.options.ownsDataDir) {
      // An app's container, root, may have left files of its own in the lock root.
      const dockerSocket = this.facts.engine === 'docker' ? this.sim.options.dockerSocket : undefined;
      teardown.defer({ name: `the data dir ${dataDir}`, stop: () => (dockerSocket ? removeTree(dataDir, dockerSocket) : rm(dataDir, { recursive: true, force: true })) });
      if (this.facts.engine === 'docker') {
        const docker = new Docker({ socketPath: this.sim.options.dockerSocket });
        teardown.defer({ name: `the volumes of device ${uuid}`, stop: () => removeDeviceLeftovers(docker, uuid) });
      }
    }
    const registry = this.#ownRegistry;
    if (registry) teardown.defer({ name: 'the registry of this device', stop: () => registry.close() });
    teardown.defer({ name: 'the simulated device', stop: () => this.sim.stop() });
    await teardown.stop();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/**
 * Capabilities of the sim target. Both engines keep volumes in host directories. Both take a
 * release through the `images` protocol, but only dockerd declares `images`: the simulated
 * engine pulls the release from the registry and plays its containers without running their
 * code, so a spec that deploys expects what it cannot give (hil/specs/release.spec.ts reads a
 * file the release's container writes). For the same reason only dockerd declares `ports`:
 * nothing would answer at a port the simulated engine publishes. `network` cuts the loopback
 * link to the cloud of a `withCloud` device.
 */
function simCapabilities(engine: SimEngine): Capability[] {
  const always: Capability[] = ['api', 'exec', 'led', 'power.reboot', 'power.cycle', 'power.cut', 'supervisor.kill', 'network', 'journal', 'files', 'files.volumes'];
  return engine === 'docker' ? [...always, 'images', 'ports'] : always;
}

type SimDriver = TargetDriver<SimTargetOptions> & { providesFor(engine: SimEngine): readonly Capability[] };

function simDriver(registry?: WorkerRegistry): SimDriver {
  return {
    name: 'sim',
    get provides() {
      return simCapabilities(defaultEngine());
    },
    providesFor: simCapabilities,
    startsFromBundle: true,
    start: (options: SimTargetOptions = {}) => startSim(options, registry),
    ...(registry ? { dispose: () => registry.close() } : {}),
  };
}

async function startSim(options: SimTargetOptions, registry: WorkerRegistry | undefined): Promise<DeviceUnderTest> {
  const engine = options.engine ?? defaultEngine();
  const dockerSocket = options.dockerSocket ?? DOCKER_SOCKET;
  const cloud = options.cloud ? { ...options.cloud, pollIntervalMs: 2_000, reportIntervalMs: 500, tunnelHeartbeatMs: 1_000 } : undefined;
  if (options.bundle && cloud) throw new FleetlabError('HIL_ERR_CAPTURE', 'a device started from a bundle runs without a lab cloud: drop withCloud from the spec');
  const version = options.supervisorVersion ? { supervisorVersion: options.supervisorVersion } : {};
  const sim = options.bundle
    ? await SimDevice.start({ ...(await replaySimOptions({ bundle: options.bundle, engine, dockerSocket })).sim, ...version })
    : await SimDevice.start({ port: 0, engine, dockerSocket, localMode: !cloud, ...(cloud ? { cloud } : {}), ...version });
  try {
    const dut = new SimUnderTest(sim, new Set(simCapabilities(engine)), engine, { hostDockerSocket: dockerSocket, ...(registry ? { registry } : {}) });
    await dut.api.waitReady(TIMEOUTS.ready);
    return dut;
  } catch (err) {
    await sim.stop().catch(() => undefined);
    throw err;
  }
}

/**
 * The sim target of one worker (index.ts loads one per worker): its devices on the simulated
 * engine share one registry, started on the first deploy and stopped by `dispose` once the
 * worker's last device has closed.
 */
export function createSimTarget(): SimDriver {
  return simDriver(new WorkerRegistry());
}

/** The sim target outside a worker: a device on the simulated engine starts a registry of its own on its first deploy, and stops it when it closes. */
export const simTarget: SimDriver = simDriver();
