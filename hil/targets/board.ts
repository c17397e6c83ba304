/**
 * The `board` target: a real Raspberry Pi in a lab, running the supervisor as a system
 * service, reached over SSH (./ssh-device.ts) for exec, files, journal and reboot, and over
 * HTTP for its API. Which board, and what the lab can do to it (watch its LED, switch its
 * power), is a JSON file named by FLEETLAB_BOARD_CONFIG (../lab/board-config.ts); the driver
 * declares only what that file allows.
 *
 * The harness never boots the device: `start()` connects to a board that is already up,
 * resets it for the spec file (device-access/ssh-reset.ts, unless the config says `"reset": false`) and
 * `close()` leaves it running.
 */
import { readFile } from 'node:fs/promises';
import { FleetlabError, errorText } from '../../src/errors.js';
import { httpApi } from '../lib/http.js';
import { boardCapabilities, loadBoardConfig, type BoardConfig } from '../lab/board-config.js';
import { readHostBaseline, resetBoard, type HostBaseline } from '../../device-access/ssh-reset.js';
import { readLab } from '../lab/lab-command.js';
import { labCapabilities, labSelection, WorkerLease } from '../lab/worker-lease.js';
import { SerialConsole } from '../../device-access/serial-console.js';
import { ensureBoardTestImages } from './board-test-images.js';
import { PulledImages } from './pulled-images.js';
import { SshDevice, type SshDeviceOptions } from '../../device-access/ssh-device.js';
import { sshObserve, unitMainPid } from './drivers/observe-ssh.js';
import type { ApiProtocol, Capability, CommandProtocol, DevicePaths, DeviceUnderTest, DiskProtocol, EngineProtocol, FilesProtocol, ImagesProtocol, JournalProtocol, LedProtocol, ObserveProtocol, PowerProtocol, SupervisorProtocol, TargetFacts } from '../../device-access/protocols.js';
import type { TargetDriver, TestAttempt } from './target-driver.js';
import { BOARD_TIMEOUTS, deadlines } from './timeouts.js';
import { waitApiDown } from './drivers/api-down.js';
import { supervisorKill, systemctlKill } from './drivers/supervisor-kill.js';
import { systemdEngine } from './drivers/engine-systemd.js';
import { diskFill } from './drivers/disk-fill.js';
import { dockerVolumePath, storedIdentity, unitLog, waitStoredIdentity } from './drivers/device-facts.js';
import { observeLedByCommand } from './drivers/led-command.js';
import { observeSysfsLed } from './drivers/led-sysfs.js';
import type { LedObserver } from './drivers/led-transition-log.js';
import { labCommandPower } from './drivers/power-lab-command.js';
import { LOGIN1_BUSCTL, LOGIN1_CALL_MS, login1Reboot } from './drivers/reboot-login1.js';

export const BOARD_TARGET = 'board';

export interface BoardTargetOptions {
  /** The config to use instead of reading FLEETLAB_BOARD_CONFIG. */
  readonly config?: BoardConfig;
  /** Not taken: a lab board runs the supervisor settings its owner installed (refused, saying so). */
  readonly supervisorVersion?: string;
}

/** What a worker keeps between spec files: the host config as it first found the board. */
export interface BoardMemory {
  baseline?: HostBaseline;
  /** The build engine and registry a team's release goes through, started by the worker's first deploy. */
  images?: PulledImages;
  /** The test app images are on the board (checked, and imported where missing, once per worker). */
  testImages?: boolean;
  /** The board's serial console, read from the worker's first start on the board to its end. */
  serial?: SerialConsole;
  /** Which board the rest belongs to (host:port): a worker given another board starts afresh. */
  board?: string;
  /** Takes the board out of the lab (a worker's lease), when it did not come back after its power control. */
  markOffline?: (reason: string) => Promise<void>;
  /** Counts an infrastructure failure against the worker's lab board (it did not answer SSH at a spec file's start). */
  infraFailure?: (detail: string) => Promise<void>;
}

/** The capture for the config's serial console: the worker's running one if it reads that device, else a new one. */
async function serialFor(config: BoardConfig, memory: BoardMemory): Promise<SerialConsole | undefined> {
  if (memory.serial && memory.serial.device !== config.serial?.device) {
    await memory.serial.close();
    memory.serial = undefined;
  }
  if (config.serial && !memory.serial) memory.serial = new SerialConsole(config.serial.device, config.serial.baud);
  return memory.serial;
}

class BoardUnderTest implements DeviceUnderTest {
  readonly target = BOARD_TARGET;
  readonly capabilities: ReadonlySet<Capability>;
  readonly facts: TargetFacts;
  readonly api: ApiProtocol;
  readonly exec: CommandProtocol;
  readonly files: FilesProtocol;
  readonly journal: JournalProtocol;
  readonly power: PowerProtocol;
  readonly supervisor: SupervisorProtocol;
  readonly engine: EngineProtocol;
  readonly disk: DiskProtocol;
  readonly led?: LedProtocol;
  readonly images?: ImagesProtocol;
  readonly paths: DevicePaths;
  readonly consoleLog?: (sinceMs?: number) => Promise<string>;
  readonly observe: ObserveProtocol;
  infrastructureFailure?: string;
  #closed = false;

  constructor(
    private readonly config: BoardConfig,
    private readonly ssh: SshDevice,
    sshOptions: SshDeviceOptions,
    identity: { uuid: string; apiKey: string },
    private readonly ledObserver: LedObserver | undefined,
    images: PulledImages | undefined,
    serial?: SerialConsole,
    markOffline?: (reason: string) => Promise<void>,
  ) {
    if (images) this.images = images.over(ssh);
    if (serial) this.consoleLog = async (sinceMs = 0) => serial.slice(sinceMs);
    this.capabilities = new Set(boardCapabilities(config));
    this.facts = { engine: 'docker', imagesArePulled: false, timeScale: config.timeScale };
    this.api = httpApi({ url: config.apiUrl, apiKey: identity.apiKey, uuid: identity.uuid, vendor: config.vendor, lockRoot: config.lockRoot, hostPaths: config.hostPaths });
    this.exec = ssh.exec;
    this.paths = { dataDir: config.dataDir, lockRoot: config.lockRoot };
    this.journal = ssh.journal;
    this.files = {
      ...ssh.files,
      // dockerd runs on the board, so its answer is already a device path.
      volumePath: (appId, volume) => dockerVolumePath(ssh, identity.uuid, appId, volume),
    };
    if (ledObserver) this.led = ledObserver;
    // Its own SSH session, so that its attempts while the board is down never reach the test's.
    this.observe = sshObserve({ reach: () => sshOptions, supervisorPid: unitMainPid(config.supervisorUnit), engineSocketPath: '/var/run/docker.sock', ...(serial ? { console: () => serial } : {}) });
    const timeouts = deadlines(BOARD_TIMEOUTS, config.timeScale);
    const url = this.api.identity.url;
    const waitDown = () => waitApiDown(url, { timeoutMs: timeouts.down, intervalMs: 200, after: 'it was told to go down' });
    // SSH comes back before the API on a board, and exec right after a reboot needs it too.
    const waitBack = async (readyMs: number) => {
      await this.api.waitReady(readyMs);
      await ssh.waitReachable(timeouts.reach);
    };
    this.power = {
      reboot: login1Reboot({
        run: (argv) => ssh.run(argv, { timeoutMs: LOGIN1_CALL_MS }),
        argv: LOGIN1_BUSCTL,
        where: 'on the board',
        callLost: (err) => err instanceof FleetlabError && /connection lost/.test(err.message),
        watchDown: () => waitDown,
        up: () => waitBack(timeouts.ready),
      }),
      ...labCommandPower({
        commands: config.power,
        board: `${config.host}:${config.sshPort}`,
        labCommandMs: timeouts.labCommand,
        readyMs: timeouts.ready,
        waitDown,
        waitBack,
        labFailed: (failure) => (this.infrastructureFailure = failure),
        ...(markOffline ? { markOffline } : {}),
      }),
    };
    this.engine = systemdEngine(ssh.exec, { unit: 'docker', readyMs: timeouts.ready });
    this.disk = diskFill(ssh.exec, ['/var/lib/docker', config.dataDir]);
    this.supervisor = supervisorKill({
      kill: () => systemctlKill(ssh, config.supervisorUnit),
      url,
      downMs: timeouts.down,
      waitReady: () => this.api.waitReady(timeouts.ready),
    });
  }

  supervisorLog(): Promise<string> {
    return unitLog(this.ssh, this.config.supervisorUnit);
  }

  /** Leaves the board running: only the harness's connection and observer go. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.ledObserver?.stop().catch(() => undefined);
    await this.observe.close?.().catch(() => undefined);
    await this.ssh.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

async function startLedObserver(config: BoardConfig, ssh: SshDevice): Promise<LedObserver | undefined> {
  const led = config.led;
  if (!led) return undefined;
  if (led.observe.kind === 'sysfs') return observeSysfsLed(ssh, led.gpio, led.observe.pollMs);
  const description = typeof led.gpio === 'number' ? `gpio ${led.gpio}` : `${led.gpio.chip} pin ${led.gpio.offset}`;
  return observeLedByCommand(led.observe.command, description);
}

/**
 * Connects to the board the config names and, unless the config says `"reset": false`,
 * resets it; `memory` keeps the host baseline from the worker's first start for the next.
 */
export async function startBoard(config: BoardConfig, memory: BoardMemory = {}): Promise<DeviceUnderTest> {
  const board = `${config.host}:${config.sshPort}`;
  if (memory.board !== board) {
    // Another board (a lab worker's first was marked offline): its own baseline and images.
    memory.baseline = undefined;
    memory.testImages = false;
    memory.board = board;
  }
  let privateKey: Buffer;
  try {
    privateKey = await readFile(config.privateKey);
  } catch (err) {
    throw new FleetlabError('SUP_ERR_HOST', `board config "privateKey": cannot read ${config.privateKey} (${errorText(err)})`, { cause: err });
  }
  const sshOptions: SshDeviceOptions = { host: config.host, port: config.sshPort, username: config.user, privateKey };
  const ssh = new SshDevice(sshOptions);
  const timeouts = deadlines(BOARD_TIMEOUTS, config.timeScale);
  let observer: LedObserver | undefined;
  // Before anything can fail: a board that does not come up is where its console matters most.
  const serial = await serialFor(config, memory);
  try {
    await ssh.waitReachable(timeouts.reach).catch(async (err: unknown) => {
      await memory.infraFailure?.(`SSH did not answer at a spec file's start: ${errorText(err)}`).catch((e: unknown) => console.error(`fleetlab board target: counting the infrastructure failure: ${errorText(e)}`));
      throw err;
    });
    if (!memory.testImages) {
      await ensureBoardTestImages(ssh, (line) => console.error(`fleetlab board target: ${line}`));
      memory.testImages = true;
    }
    if (config.reset) {
      memory.baseline ??= await readHostBaseline(ssh, config.hostPaths);
      const supervisor = { unit: config.supervisorUnit, dataDir: config.dataDir, lockRoot: config.lockRoot, proxyConfigDir: config.hostPaths.proxyConfigDir };
      await resetBoard(ssh, { supervisor, baseline: memory.baseline, timeoutMs: timeouts.reset });
    }
    const stored = config.reset ? await waitStoredIdentity(ssh, config.dataDir, timeouts.ready) : await storedIdentity(ssh, config.dataDir);
    observer = await startLedObserver(config, ssh);
    memory.images ??= new PulledImages();
    const dut = new BoardUnderTest(config, ssh, sshOptions, { uuid: stored.uuid, apiKey: config.apiKey ?? stored.deviceKey }, observer, memory.images, serial, memory.markOffline);
    await dut.api.waitReady(timeouts.ready);
    return dut;
  } catch (err) {
    await observer?.stop().catch(() => undefined);
    await ssh.close();
    throw err;
  }
}

/**
 * A driver per worker (the registry constructs one per load): it keeps the board's host
 * baseline between spec files. `provides` is read from the config each time (a getter, as
 * sim.ts does for its engine), so the capabilities a spec's needs() sees are the ones the
 * same config gives the device. With a lab (FLEETLAB_LAB, `fleetlab test --lab`), the worker
 * leases a board of its own at its first spec file and gives it back at its end
 * (../lab/worker-lease.ts); `provides` is then what every matching board of the lab offers.
 */
export function createBoardTarget(): TargetDriver<BoardTargetOptions> {
  const lab = labSelection();
  const lease = lab ? new WorkerLease(lab, (line) => console.error(`fleetlab lab (worker ${process.env.TEST_WORKER_INDEX ?? 0}): ${line}`)) : undefined;
  const memory: BoardMemory = lease ? { markOffline: (reason) => lease.markOffline(reason), infraFailure: (detail) => lease.infraFailure(detail) } : {};
  return {
    name: BOARD_TARGET,
    get provides() {
      return lab ? labCapabilities(readLab(lab.file), lab.tags) : boardCapabilities(loadBoardConfig());
    },
    async prepare() {
      await lease?.config();
    },
    async start(options: BoardTargetOptions = {}) {
      if (options.supervisorVersion) throw new FleetlabError('HIL_ERR_CAPABILITY', `the board target runs the supervisor with the settings its board was given: it cannot answer as supervisor ${options.supervisorVersion} for one spec; run version specs on the sim, container or qemu target (or set FLEETLAB_SUPERVISOR_VERSION in the board's /etc/fleetlab/supervisor.env)`);
      return startBoard(options.config ?? (lease ? await lease.config() : loadBoardConfig()), memory);
    },
    ...(lease ? { attemptEnded: (attempt: TestAttempt) => lease.attemptEnded(attempt) } : {}),
    async dispose() {
      try {
        await memory.serial?.close();
        memory.serial = undefined;
        await memory.images?.close();
        memory.images = undefined;
      } finally {
        await lease?.release();
      }
    },
  };
}
