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
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { FleetlabError, errorText } from '../../src/errors.js';
import { LABEL } from '../../src/protocol/engine-labels.js';
import { gpioNumberFromChips, type GpioChip } from '../../src/supervisor/adapters/led.js';
import { httpApi } from '../lib/http.js';
import { boardCapabilities, loadBoardConfig, type BoardConfig, type BoardLedGpio } from '../lab/board-config.js';
import { readHostBaseline, resetBoard, type HostBaseline } from '../../device-access/ssh-reset.js';
import { readLab } from '../lab/lab-command.js';
import { labCapabilities, labSelection, WorkerLease } from '../lab/worker-lease.js';
import { SerialConsole } from '../../device-access/serial-console.js';
import { ensureBoardTestImages } from './board-test-images.js';
import { PulledImages } from './pulled-images.js';
import { SshDevice, type FollowedCommand } from '../../device-access/ssh-device.js';
import type { ApiProtocol, Capability, CommandProtocol, ImagesProtocol, DeviceUnderTest, FilesProtocol, JournalProtocol, DevicePaths, LedProtocol, LedTransition, PowerProtocol, TargetFacts } from '../../device-access/protocols.js';
import type { TargetDriver } from './target-driver.js';

export const BOARD_TARGET = 'board';
/**
 * Deadlines for a board at timeScale 1, multiplied by the config's timeScale like the specs'
 * own: a Pi 4 from power-on to the supervisor's API is 30-60 s, an SD card in a slow lab
 * takes longer, and the emulated Pi (timeScale 8) takes 4-5 min.
 */
const READY_MS = 180_000;
const REACH_MS = 60_000;
/** After login1 Reboot or a cut, how long the API may keep answering before that is an error. */
const DOWN_MS = 60_000;
const LAB_COMMAND_MS = 120_000;
/** Stopping the supervisor and removing its containers (at timeScale 1). */
const RESET_MS = 60_000;
const SYSFS_GPIO = '/sys/class/gpio';
/** How long the LED observer's start waits for its first sample before going on without it. */
const FIRST_SAMPLE_MS = 15_000;
const LOGIN1 = ['busctl', 'call', 'org.freedesktop.login1', '/org/freedesktop/login1', 'org.freedesktop.login1.Manager', 'Reboot', 'b', 'false'];

export interface BoardTargetOptions {
  /** The config to use instead of reading FLEETLAB_BOARD_CONFIG. */
  readonly config?: BoardConfig;
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

/** A deadline for this board: `ms` at timeScale 1. */
function scaledFor(config: BoardConfig, ms: number): number {
  return ms * config.timeScale;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function boardError(message: string, cause?: unknown): FleetlabError {
  return new FleetlabError('SUP_ERR_HOST', message, cause === undefined ? undefined : { cause });
}

/** The line's global number from the chips read on the board (the supervisor's own rule). */
export function gpioNumberOnBoard(gpio: BoardLedGpio, chips: readonly GpioChip[]): number {
  return gpioNumberFromChips(gpio, chips, 'the board\'s /sys/class/gpio');
}

/** `label\tbase\tngpio` per gpiochip directory, read in one round trip. */
export async function readGpioChips(ssh: SshDevice, sysfsGpioDir = SYSFS_GPIO): Promise<GpioChip[]> {
  const script = 'for d in "$1"/gpiochip*; do [ -d "$d" ] || continue; printf "%s\\t%s\\t%s\\n" "$(cat "$d/label")" "$(cat "$d/base")" "$(cat "$d/ngpio")"; done';
  const r = await ssh.run(['sh', '-c', script, 'fleetlab-gpiochips', sysfsGpioDir]);
  if (r.exitCode !== 0) throw boardError(`cannot read GPIO chips under ${sysfsGpioDir} on ${ssh.where}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  return r.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [label = '', base = '', ngpio = ''] = line.split('\t');
      return { label, base: Number(base), ngpio: Number(ngpio) };
    });
}

/** Transitions as an observer records them: a sample equal to the last level is not one. */
class TransitionLog {
  readonly #entries: LedTransition[] = [];

  record(value: 0 | 1, at = Date.now()): void {
    if (this.#entries.at(-1)?.value === value) return;
    this.#entries.push({ at, value });
  }

  get last(): 0 | 1 | undefined {
    return this.#entries.at(-1)?.value;
  }

  since(sinceMs: number): LedTransition[] {
    return this.#entries.filter((t) => t.at >= sinceMs);
  }
}

/** Feeds complete `0`/`1` lines of a byte stream to `onValue`; anything else is ignored. */
function lineSplitter(onValue: (v: 0 | 1) => void): (chunk: Buffer) => void {
  let pending = '';
  return (chunk) => {
    pending += chunk.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const v = line.trim();
      if (v === '0' || v === '1') onValue(v === '1' ? 1 : 0);
    }
  };
}

export interface LedObserver extends LedProtocol {
  stop(): Promise<void>;
}

/**
 * The device side of the sysfs observer, in bash so that a sample forks nothing: `read` from
 * the value file and `read -t` on stdin as the pause are builtins. (A `sleep` per sample is
 * a fork and an exec: ~120 ms on the emulated Pi under TCG, and the 200 ms blink lost
 * toggles.) Only changes are written, the first sample always. The channel's stdin stays open
 * and silent, so the pause times out (status > 128) until the harness closes the channel:
 * then it reads EOF and the loop ends; a write into a closed channel ends it too.
 */
export const SYSFS_OBSERVER_LOOP = `last=; while :; do v=; read -r v 2>/dev/null < "$1"; v=\${v:--}; if [ "$v" != "$last" ]; then echo "$v" || exit 0; last=$v; fi; read -r -t "$2" _; [ $? -gt 128 ] || exit 0; done`;

/**
 * Samples the line's sysfs value on the device every `pollMs` in one bash process streaming
 * each change (SYSFS_OBSERVER_LOOP), and the harness stamps a change on arrival with its own
 * clock (one channel, not a round trip per sample). It dies with the connection at a reboot
 * and is started again once the board answers; what the line did while SSH was down is not
 * seen. Until the supervisor exports the line there is no value file and the loop prints `-`.
 */
export async function observeSysfsLed(ssh: SshDevice, gpio: BoardLedGpio, pollMs: number, sysfsGpioDir = SYSFS_GPIO): Promise<LedObserver> {
  const number = gpioNumberOnBoard(gpio, typeof gpio === 'number' ? [] : await readGpioChips(ssh, sysfsGpioDir));
  const valueFile = `${sysfsGpioDir}/gpio${number}/value`;
  const hasBash = await ssh.run(['bash', '-c', 'exit 0']);
  if (hasBash.exitCode !== 0) throw boardError(`the sysfs LED observer runs bash on the board, and ${ssh.where} has none (exit ${hasBash.exitCode}); install bash there or observe the LED with a lab command ("led.observe": {"command": ...})`);
  const log = new TransitionLog();
  const pause = (pollMs / 1000).toFixed(3);
  let stopped = false;
  let current: FollowedCommand | undefined;
  let sampling: () => void = () => undefined;
  const firstSample = new Promise<void>((r) => (sampling = r));
  const onSample = lineSplitter((v) => log.record(v));
  const running = (async () => {
    while (!stopped) {
      try {
        current = await ssh.follow(['bash', '-c', SYSFS_OBSERVER_LOOP, 'fleetlab-led', valueFile, pause], (chunk) => {
          sampling();
          onSample(chunk);
        });
        if (stopped) current.stop();
        await current.done;
      } catch {
        // Board rebooting or unreachable: try again below.
      }
      if (!stopped) await sleep(1000);
    }
  })();
  // Observing means sampling: a transition right after start must not be missed.
  const startWait = setTimeout(() => sampling(), FIRST_SAMPLE_MS);
  await firstSample;
  clearTimeout(startWait);
  const line = typeof gpio === 'number' ? `gpio ${number}` : `gpio ${number}, ${gpio.chip} pin ${gpio.offset}`;
  return {
    line: `${line} (sysfs sampled every ${pollMs} ms over SSH)`,
    level: async () => {
      const r = await ssh.run(['cat', valueFile]);
      // Not exported yet: the supervisor has never driven it, so it is low.
      return r.exitCode === 0 && r.stdout.trim() === '1' ? 1 : 0;
    },
    transitions: async (sinceMs = 0) => log.since(sinceMs),
    stop: async () => {
      stopped = true;
      current?.stop();
      await running;
    },
  };
}

/**
 * Runs a lab-host command that prints the line's level as `0`/`1` lines (a GPIO input of the
 * lab host wired to the LED, a logic analyser...). It sees the line through reboots and power
 * cuts, which the sysfs observer cannot. Restarted when it exits.
 */
export function observeLedByCommand(command: string, gpioDescription: string): LedObserver {
  const log = new TransitionLog();
  let stopped = false;
  let child: ChildProcess | undefined;
  let lastError = '';
  const running = (async () => {
    while (!stopped) {
      // Its own process group, so stop() ends whatever the command started too.
      child = spawn('sh', ['-c', command], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      child.stdout!.on('data', lineSplitter((v) => log.record(v)));
      child.stderr!.on('data', (chunk: Buffer) => (lastError = chunk.toString('utf8').trim().slice(-500)));
      await new Promise<void>((resolve) => child!.once('close', () => resolve()).once('error', () => resolve()));
      if (!stopped) await sleep(1000);
    }
  })();
  return {
    line: `${gpioDescription} (observed by lab command: ${command})`,
    level: async () => {
      if (log.last === undefined && lastError) throw boardError(`LED observer command printed no level: ${lastError}`);
      return log.last ?? 0;
    },
    transitions: async (sinceMs = 0) => log.since(sinceMs),
    stop: async () => {
      stopped = true;
      const pid = child?.pid;
      if (pid !== undefined && child?.exitCode === null) {
        try {
          process.kill(-pid, 'SIGTERM');
        } catch {
          // already gone
        }
      }
      await running;
    },
  };
}

/** Runs a lab-host shell command (power switch); rejects with its output when it fails. */
function runLabCommand(what: string, command: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', command], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const keep = (chunk: Buffer) => (output = (output + chunk.toString('utf8')).slice(-2000));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => child.kill('SIGKILL'), LAB_COMMAND_MS);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(boardError(`board power ${what}: cannot run "${command}": ${err.message}`, err));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(boardError(`board power ${what}: "${command}" ${signal ? `killed by ${signal}` : `exited ${code}`}: ${output.trim() || '(no output)'}`));
    });
  });
}

/** uuid and device key from the supervisor's store (src/supervisor/state/store.ts: <dataDir>/device.json). */
export async function storedIdentity(ssh: SshDevice, dataDir: string): Promise<{ uuid: string; deviceKey: string }> {
  const path = `${dataDir}/device.json`;
  let text: string;
  try {
    text = (await ssh.files.read(path)).toString('utf8');
  } catch (err) {
    throw boardError(`cannot read the supervisor's store ${path} on the board (${errorText(err)}); has the supervisor run there once, and is "dataDir" in the board config right?`, err);
  }
  let record: { uuid?: unknown; deviceKey?: unknown };
  try {
    record = JSON.parse(text) as typeof record;
  } catch (err) {
    throw boardError(`the supervisor's store ${path} on the board is not JSON: ${errorText(err)}`, err);
  }
  if (typeof record.uuid !== 'string' || typeof record.deviceKey !== 'string') throw boardError(`the supervisor's store ${path} on the board has no uuid/deviceKey`);
  return { uuid: record.uuid, deviceKey: record.deviceKey };
}

/** The identity once the supervisor has written its store (right after a reset it has not yet). */
async function waitStoredIdentity(ssh: SshDevice, dataDir: string, timeoutMs: number): Promise<{ uuid: string; deviceKey: string }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await storedIdentity(ssh, dataDir);
    } catch (err) {
      if (Date.now() >= deadline) throw err;
    }
    await sleep(1000);
  }
}

/** Where the named volume of an app lives on the device, asked of the device's dockerd. */
export async function dockerVolumePath(ssh: SshDevice, uuid: string, appId: number, volume: string): Promise<string | undefined> {
  const filters = [`${LABEL.device}=${uuid}`, `${LABEL.appId}=${appId}`, `${LABEL.volume}=${volume}`].flatMap((f) => ['--filter', `label=${f}`]);
  const listed = await ssh.run(['docker', 'volume', 'ls', '-q', ...filters]);
  if (listed.exitCode !== 0) throw boardError(`docker volume ls on the device: ${listed.stderr.trim() || `exit ${listed.exitCode}`}`);
  const name = listed.stdout.split('\n').find(Boolean);
  if (!name) return undefined;
  const inspected = await ssh.run(['docker', 'volume', 'inspect', '--format', '{{.Mountpoint}}', name]);
  if (inspected.exitCode !== 0) return undefined; // removed between the two calls
  return inspected.stdout.trim() || undefined;
}

/** A systemd unit's journal on the device (the supervisor's log for failed tests). */
export async function unitLog(ssh: SshDevice, unit: string): Promise<string> {
  try {
    const r = await ssh.run(['journalctl', '--no-pager', '-o', 'short-iso', '--lines', '2000', '--unit', unit]);
    return r.stdout || `(no supervisor log: journalctl exited ${r.exitCode}: ${r.stderr.trim()})`;
  } catch (err) {
    return `(no supervisor log: ${errorText(err)})`;
  }
}

/** Resolves once `url/ping` stops answering 200 (the device went down). */
export async function waitApiDown(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`${url}/ping`, { signal: AbortSignal.timeout(1000) });
      await res.body?.cancel();
      if (!res.ok) return;
    } catch {
      return;
    }
    await sleep(200);
  }
  throw boardError(`the device's API kept answering for ${timeoutMs / 1000} s after it was told to go down`);
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
  readonly led?: LedProtocol;
  readonly images?: ImagesProtocol;
  readonly paths: DevicePaths;
  readonly consoleLog?: (sinceMs?: number) => Promise<string>;
  infrastructureFailure?: string;
  #closed = false;

  constructor(
    private readonly config: BoardConfig,
    private readonly ssh: SshDevice,
    identity: { uuid: string; apiKey: string },
    private readonly ledObserver: LedObserver | undefined,
    images: PulledImages | undefined,
    serial?: SerialConsole,
    private readonly markOffline?: (reason: string) => Promise<void>,
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
    this.power = this.#powerProtocol();
  }

  #powerProtocol(): PowerProtocol {
    const { cycle, off, on } = this.config.power;
    const missing = (what: string) => async () => {
      throw boardError(`board power ${what}: the board config gives no command for it ("power" in ${process.env.FLEETLAB_BOARD_CONFIG ?? 'the config'})`);
    };
    const powerOff = off === undefined ? undefined : async () => {
      await runLabCommand('off', off);
      await this.#waitApiDown(this.#scaled(DOWN_MS));
    };
    const powerOn = on === undefined ? undefined : async () => {
      await runLabCommand('on', on);
      await this.#waitBackAfterPower('on');
    };
    return {
      reboot: async () => {
        try {
          const r = await this.ssh.run(LOGIN1, { timeoutMs: 30_000 });
          if (r.exitCode !== 0) throw boardError(`login1 Reboot on the board failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
        } catch (err) {
          // The board going down can take the SSH session with it before busctl answers.
          if (!(err instanceof FleetlabError && /connection lost/.test(err.message))) throw err;
        }
        await this.#waitApiDown(this.#scaled(DOWN_MS));
        await this.#waitBack();
      },
      cycle: cycle !== undefined
        ? async () => {
            await runLabCommand('cycle', cycle);
            await this.#waitApiDown(this.#scaled(DOWN_MS));
            await this.#waitBackAfterPower('cycle');
          }
        : powerOff && powerOn
          ? async () => {
              await powerOff();
              await powerOn();
            }
          : missing('cycle'),
      off: powerOff ?? missing('off'),
      on: powerOn ?? missing('on'),
    };
  }

  /** Back means the API answers; SSH comes back first on a board, so it is awaited too for exec right after. */
  async #waitBack(readyMs = this.#scaled(READY_MS)): Promise<void> {
    await this.api.waitReady(readyMs);
    await this.ssh.waitReachable(this.#scaled(REACH_MS));
  }

  /**
   * After the lab's power control: a board that does not answer within its power timeout is
   * the lab's failure, not the device's. The test says so, and a lab board leaves the lab
   * rather than being handed to the next run, which would only wait on it again.
   */
  async #waitBackAfterPower(what: 'cycle' | 'on'): Promise<void> {
    const timeoutMs = this.config.power.timeoutSeconds !== undefined ? this.config.power.timeoutSeconds * 1000 : this.#scaled(READY_MS);
    try {
      await this.#waitBack(timeoutMs);
    } catch (err) {
      const reason = `did not answer within ${Math.round(timeoutMs / 1000)} s after power ${what} (${errorText(err)})`;
      this.infrastructureFailure = `board ${this.config.host}:${this.config.sshPort} ${reason}`;
      let marked = '';
      if (this.markOffline) {
        marked = await this.markOffline(reason).then(
          () => '; marked offline in the lab (fleetlab lab online <board> once it is fixed)',
          (e: unknown) => `; marking it offline in the lab failed: ${errorText(e)}`,
        );
      }
      throw new FleetlabError('HIL_ERR_BOARD_OFFLINE', `infrastructure failure: ${this.infrastructureFailure}${marked}`, { cause: err });
    }
  }

  #scaled(ms: number): number {
    return scaledFor(this.config, ms);
  }

  #waitApiDown(timeoutMs: number): Promise<void> {
    return waitApiDown(this.api.identity.url, timeoutMs);
  }

  supervisorLog(): Promise<string> {
    return unitLog(this.ssh, this.config.supervisorUnit);
  }

  /** Leaves the board running: only the harness's connection and observer go. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.ledObserver?.stop().catch(() => undefined);
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
    throw boardError(`board config "privateKey": cannot read ${config.privateKey} (${errorText(err)})`, err);
  }
  const ssh = new SshDevice({ host: config.host, port: config.sshPort, username: config.user, privateKey });
  let observer: LedObserver | undefined;
  // Before anything can fail: a board that does not come up is where its console matters most.
  const serial = await serialFor(config, memory);
  try {
    await ssh.waitReachable(scaledFor(config, REACH_MS));
    if (!memory.testImages) {
      await ensureBoardTestImages(ssh, (line) => console.error(`fleetlab board target: ${line}`));
      memory.testImages = true;
    }
    if (config.reset) {
      memory.baseline ??= await readHostBaseline(ssh, config.hostPaths);
      const supervisor = { unit: config.supervisorUnit, dataDir: config.dataDir, lockRoot: config.lockRoot, proxyConfigDir: config.hostPaths.proxyConfigDir };
      await resetBoard(ssh, { supervisor, baseline: memory.baseline, timeoutMs: scaledFor(config, RESET_MS) });
    }
    const stored = config.reset ? await waitStoredIdentity(ssh, config.dataDir, scaledFor(config, READY_MS)) : await storedIdentity(ssh, config.dataDir);
    observer = await startLedObserver(config, ssh);
    memory.images ??= new PulledImages();
    const dut = new BoardUnderTest(config, ssh, { uuid: stored.uuid, apiKey: config.apiKey ?? stored.deviceKey }, observer, memory.images, serial, memory.markOffline);
    await dut.api.waitReady(scaledFor(config, READY_MS));
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
  const memory: BoardMemory = lease ? { markOffline: (reason) => lease.markOffline(reason) } : {};
  return {
    name: BOARD_TARGET,
    get provides() {
      return lab ? labCapabilities(readLab(lab.file), lab.tags) : boardCapabilities(loadBoardConfig());
    },
    async prepare() {
      await lease?.config();
    },
    async start(options: BoardTargetOptions = {}) {
      return startBoard(options.config ?? (lease ? await lease.config() : loadBoardConfig()), memory);
    },
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
