/**
 * `fleetlab qemu boot`: one emulated board from a built image (../device-image/build.ts). The image is
 * never written: the board runs on a qcow2 overlay, kept per machine under the cache so the
 * board's state survives a `qemu boot` restart, or thrown away with `--snapshot` (as QEMU's own
 * `-snapshot` does). The device API and SSH are forwarded to loopback ports, the serial console
 * goes to a file, and QMP is the control channel. Ready means the supervisor answers `/ping`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp, rename, rm, symlink } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { execa } from 'execa';
import { FleetlabError } from '../src/errors.js';
import { sleep, until } from '../src/wait.js';
import type { QemuImage } from '../device-image/build.js';
import { boardCpus, buildQemuArgv, CONSOLE_CHARDEV, type MachineKind, type QemuTuning } from './qemu-argv.js';
import { QmpClient } from './qmp.js';
import { cacheRoot, needTool, qemuTools } from '../device-image/tools.js';
import { freePort } from '../src/free-port.js';
import { ownerRecord, reapStale, writeOwner } from '../src/owned-dirs.js';
import { processStart, stoppedWithParent } from '../src/processes.js';
import { watchUsbNet } from './usb-net-watch.js';

export interface BootOptions {
  readonly image: QemuImage;
  readonly machine?: MachineKind;
  /** Throwaway overlay (deleted at stop) instead of the machine's persistent one. */
  readonly snapshot?: boolean;
  /** Loopback ports; default free ones. */
  readonly apiPort?: number;
  readonly sshPort?: number;
  readonly readyTimeoutMs?: number;
  /** Where the overlay (with --snapshot), QMP socket and logs go; default a new temp dir. */
  readonly runDir?: string;
  /** Extra kernel command line words. */
  readonly appendExtra?: readonly string[];
  /**
   * What ready means: the supervisor answering `/ping` (default), or, for a bare image with no
   * supervisor yet, the board's SSH server greeting.
   */
  readonly readyWhen?: 'api' | 'ssh';
  /** The console on a pseudo-terminal too, linked at `<runDir>/console` (ReadyInfo.serialPty): a lab board's serial adapter. */
  readonly consolePty?: boolean;
  /** virt's vCPUs (default 2) and how QEMU emulates (bench/qemu-options.bench.ts). */
  readonly cpus?: number;
  readonly tuning?: QemuTuning;
  readonly progress?: (detail: string) => void;
}

/** The one JSON line `qemu boot` prints when the board is ready. */
export interface ReadyInfo {
  readonly event: 'ready';
  readonly machine: MachineKind;
  readonly apiUrl: string;
  readonly sshPort: number;
  readonly sshKey: string;
  readonly serialLog: string;
  /**
   * With consolePty: a link to the console's pseudo-terminal that stays put when QEMU starts
   * again after a reset (a new process has a new /dev/pts), as a USB serial adapter stays
   * /dev/ttyUSB0 while its board reboots.
   */
  readonly serialPty?: string;
  /** QMP for the user (the launcher holds its own socket). */
  readonly qmpSocket: string;
  readonly overlay: string;
  readonly pid: number;
  readonly bootMs: number;
}


/** Boots in a row that may lose their USB network and be powered on again (./usb-net-watch.ts). */
export const USB_NET_RETRIES = 2;

/** In the run dir: `qemu power cycle` asks for QEMU to be started again after it quits. */
const POWER_CYCLE_REQUEST = 'power-cycle.request';

/** The last lines of the serial console, for errors that must say what the guest was doing. */
export function serialTail(serialLog: string, lines = 25): string {
  try {
    return readFileSync(serialLog, 'utf8').replace(/\r/g, '').split('\n').slice(-lines).join('\n');
  } catch {
    return '(no serial output)';
  }
}

/**
 * Asks `answers()` every `everyMs` until it says yes; fails early when `alive()` names why the
 * board is gone, and after `timeoutMs` with `what` did not answer.
 */
export async function pollBoard(answers: () => Promise<boolean>, what: string, timeoutMs: number, alive: () => string | undefined, everyMs: number): Promise<void> {
  await until(what, answers, (yes) => yes, {
    timeoutMs,
    intervalMs: everyMs,
    alive: () => alive() || true,
    // A board that answers nothing is a host failure, worded as the board's own (tests match it).
    fail: (f) => new FleetlabError('SUP_ERR_HOST', f.end === 'gone' ? f.reason! : `${what} within ${Math.round(timeoutMs / 1000)} s`),
  });
}

/** Polls `url/ping` every `everyMs` until 200; fails early when `alive()` turns false. */
export function waitForPing(url: string, timeoutMs: number, alive: () => string | undefined, everyMs = 1000): Promise<void> {
  const ping = async () => {
    try {
      const res = await fetch(`${url}/ping`, { signal: AbortSignal.timeout(3000) });
      await res.body?.cancel();
      return res.ok;
    } catch {
      return false; // not up yet: the forward refuses or the guest does not answer
    }
  };
  return pollBoard(ping, `the board's supervisor did not answer ${url}/ping`, timeoutMs, alive, everyMs);
}

/**
 * Polls a loopback port until an SSH server greets on it (`SSH-2.0-...`). QEMU's user network
 * accepts a forwarded connection before the guest listens and then drops it, so a connect
 * alone proves nothing.
 */
export function waitForSshGreeting(port: number, timeoutMs: number, alive: () => string | undefined, everyMs = 1000): Promise<void> {
  const greets = () =>
    new Promise<boolean>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port });
      const done = (ok: boolean) => {
        socket.destroy();
        resolve(ok);
      };
      socket.setTimeout(3000, () => done(false));
      socket.once('data', (chunk) => done(chunk.toString('latin1').startsWith('SSH-')));
      socket.once('error', () => done(false));
      socket.once('close', () => done(false));
    });
  return pollBoard(greets, `the board's SSH server did not answer on 127.0.0.1:${port}`, timeoutMs, alive, everyMs);
}

/** A running board: QEMU, its QMP connection and where to reach it. */
export class QemuBoard {
  #exit: string | undefined;
  #shutdownReason: string | undefined;
  /** Why the launcher powered the board off to power it on again, if it did. */
  #powerAgain: string | undefined;
  readonly exited: Promise<void>;

  constructor(
    readonly info: Omit<ReadyInfo, 'event' | 'bootMs' | 'pid'>,
    readonly process: ChildProcess,
    readonly qmp: QmpClient,
    /** Removes what this boot created; a relaunched board inherits it. */
    readonly cleanup: () => Promise<void>,
    /** How many more boots in a row may be powered on again for a dead USB network. */
    readonly usbNetRetries: number,
    /** How this QEMU emulates, so a board powered on again is the same machine. */
    readonly emulation: { readonly cpus?: number; readonly tuning?: QemuTuning } = {},
  ) {
    qmp.on('event', (e) => {
      if (e.event === 'SHUTDOWN' && typeof e.data?.reason === 'string') this.#shutdownReason = e.data.reason;
    });
    this.exited = new Promise((resolveExit) => {
      process.once('exit', (code, signal) => {
        this.#exit = `QEMU exited (${signal ?? `code ${code}`})`;
        resolveExit();
      });
    });
    if (info.machine === 'raspi3b' && usbNetRetries > 0) {
      const stopWatch = watchUsbNet({ serialLog: info.serialLog, onDead: (why) => void this.#powerOffToPowerOnAgain(why) });
      void this.exited.then(stopWatch);
    }
  }

  async #powerOffToPowerOnAgain(why: string): Promise<void> {
    if (this.#exit) return;
    this.#powerAgain = why;
    await this.quit();
  }

  /** Why QEMU is gone, or undefined while it runs. */
  get exitReason(): string | undefined {
    return this.#exit;
  }

  /**
   * The guest reset the machine (a reboot, the watchdog), or the launcher powered it off for
   * a dead USB network (`powerAgainCause`): with `-no-reboot` either ends QEMU, and the
   * launcher is to power the board on again (`relaunch`).
   */
  get guestReset(): boolean {
    return this.#shutdownReason === 'guest-reset' || this.#powerAgain !== undefined;
  }

  /** Set when the launcher itself powered the board off to power it on again: why. */
  get powerAgainCause(): string | undefined {
    return this.#powerAgain;
  }

  /** Why the board is to be powered on again, for the launcher's message. */
  get resetCause(): string {
    return this.#powerAgain ?? 'by the guest';
  }

  /** The dead-USB-network retries the next boot of this board gets. */
  get nextUsbNetRetries(): number {
    return this.#powerAgain ? this.usbNetRetries - 1 : USB_NET_RETRIES;
  }

  /** Power off at once (QMP quit): no shutdown in the guest, the overlay keeps what was written. */
  async quit(): Promise<void> {
    if (this.#exit) return;
    await this.qmp.execute('quit').catch(() => undefined);
    // Ten seconds for QEMU to quit by itself, then it is killed.
    await Promise.race([this.exited, sleep(10_000)]);
    if (!this.#exit) this.process.kill('SIGKILL');
    await this.exited;
    await this.qmp.close().catch(() => undefined);
  }

  /** Quits and removes what this boot created (the overlay too, if it was a throwaway one). */
  async stop(): Promise<void> {
    await this.quit();
    await this.cleanup();
  }
}

/** The run dirs (sockets, logs, throwaway overlays) of `qemu boot`'s boards and the harness's. */
export const RUN_DIR_PREFIXES = ['fleetlab-qemu-', 'fleetlab-hil-qemu-'] as const;

/**
 * A launcher killed with -9 takes its QEMU with it (`launch` starts it with setpriv
 * --pdeathsig) but cannot remove its run dir and overlay; without setpriv its QEMU runs on.
 * Every launch names its QEMU in the run dir's owner file (src/owned-dirs.ts); this stops the
 * QEMU of run dirs under `root` whose launcher is gone and removes them. Every boot and
 * restore calls it.
 */
export async function reapAbandonedBoards(root: string = tmpdir()): Promise<string[]> {
  return (await Promise.all(RUN_DIR_PREFIXES.map((prefix) => reapStale(root, prefix)))).flat();
}

/** The persistent overlay of `machine` for `image`: state kept across `qemu boot` runs. */
export function persistentOverlay(image: QemuImage, machine: MachineKind): string {
  return join(cacheRoot(), 'qemu', 'boards', `${machine}-${image.key}.qcow2`);
}

export function createOverlay(image: QemuImage, overlay: string): Promise<void> {
  return createQcow2Overlay(overlay, { file: image.sdImage, format: 'raw' }, image.diskBytes);
}

/** A copy-on-write qcow2 overlay of `backing` (the image, or a saved board's frozen disk), optionally larger. */
export async function createQcow2Overlay(overlay: string, backing: { file: string; format: 'raw' | 'qcow2' }, sizeBytes?: number): Promise<void> {
  const size = sizeBytes ? [String(sizeBytes)] : [];
  const r = await execa(needTool(qemuTools.qemuImg), ['create', '-q', '-f', 'qcow2', '-F', backing.format, '-b', backing.file, overlay, ...size], { reject: false, all: true });
  if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `qemu-img create ${overlay} on ${backing.file}: ${r.all?.trim()}`);
}

/** Starts QEMU on an existing overlay and connects QMP; does not wait for the guest. */
export async function launch(o: {
  image: QemuImage;
  machine: MachineKind;
  overlay: string;
  runDir: string;
  apiPort: number;
  sshPort: number;
  appendExtra?: readonly string[];
  cleanup?: () => Promise<void>;
  /** Default USB_NET_RETRIES. */
  usbNetRetries?: number;
  consolePty?: boolean;
  /** Wait for a saved state to be streamed in (./ready-state.ts) instead of booting. */
  incoming?: boolean;
  cpus?: number;
  tuning?: QemuTuning;
}): Promise<QemuBoard> {
  const qemu = needTool(qemuTools.qemuSystem);
  // Read here, where QEMU starts, so a restored board gets the vCPUs its saved state was keyed with (ready-state.ts).
  const cpus = o.cpus ?? (o.machine === 'virt' ? boardCpus(process.env) : undefined);
  const qmpSocket = join(o.runDir, 'qmp-launcher.sock');
  const userQmpSocket = join(o.runDir, 'qmp.sock');
  const serialLog = join(o.runDir, 'serial.log');
  const argv = buildQemuArgv({
    machine: o.machine,
    kernel: o.image.kernel,
    initrd: o.image.initrd,
    ...(o.machine === 'raspi3b' ? { dtb: o.image.dtb } : {}),
    disk: o.overlay,
    ...(o.image.root ? { root: o.image.root } : {}),
    appendExtra: [...(o.appendExtra ?? [])],
    hostfwd: { api: { host: o.apiPort, guest: 48484 }, ssh: { host: o.sshPort, guest: 22 } },
    qmpSocket,
    userQmpSocket,
    serialLog,
    noReboot: true,
    ...(o.consolePty ? { consolePty: true } : {}),
    ...(o.incoming ? { incoming: true } : {}),
    ...(cpus !== undefined ? { cpus } : {}),
    ...(o.tuning ? { tuning: o.tuning } : {}),
    epochSeconds: Math.floor(Date.now() / 1000),
  });
  for (const sock of [qmpSocket, userQmpSocket]) await rm(sock, { force: true });
  const log = openSync(join(o.runDir, 'qemu.log'), 'a');
  // QEMU ends with its launcher, even one killed with -9 (a Playwright worker force-killed).
  const child = spawn(...stoppedWithParent(qemu, argv), { stdio: ['ignore', log, log] });
  closeSync(log);
  if (child.pid) {
    const pidStart = processStart(child.pid);
    writeOwner(o.runDir, ownerRecord({ pid: child.pid, ...(pidStart ? { pidStart } : {}) }));
  }
  let qmp: QmpClient;
  try {
    qmp = await QmpClient.connect({ socketPath: qmpSocket, connectTimeoutMs: 15_000 });
  } catch (err) {
    child.kill('SIGKILL');
    const qemuLog = existsSync(join(o.runDir, 'qemu.log')) ? readFileSync(join(o.runDir, 'qemu.log'), 'utf8').trim() : '';
    throw new FleetlabError('SUP_ERR_HOST', `QEMU did not open its QMP socket: ${qemuLog || String(err)}`);
  }
  const serialPty = o.consolePty ? await linkConsolePty(qmp, join(o.runDir, 'console')) : undefined;
  return new QemuBoard(
    { machine: o.machine, apiUrl: `http://127.0.0.1:${o.apiPort}`, sshPort: o.sshPort, sshKey: o.image.sshKey, serialLog, ...(serialPty ? { serialPty } : {}), qmpSocket: userQmpSocket, overlay: o.overlay },
    child,
    qmp,
    o.cleanup ?? (async () => undefined),
    o.usbNetRetries ?? USB_NET_RETRIES,
    { ...(cpus !== undefined ? { cpus } : {}), ...(o.tuning ? { tuning: o.tuning } : {}) },
  );
}

/** Points `link` at the console chardev's /dev/pts path (replaced in one rename, so a reader never sees it missing). */
async function linkConsolePty(qmp: QmpClient, link: string): Promise<string> {
  const chardevs = await qmp.execute<Array<{ label: string; filename: string }>>('query-chardev');
  const pty = chardevs.find((c) => c.label === CONSOLE_CHARDEV)?.filename.replace(/^pty:/, '');
  if (!pty?.startsWith('/dev/')) throw new FleetlabError('SUP_ERR_HOST', `QEMU did not say where the console's pseudo-terminal is (query-chardev: ${JSON.stringify(chardevs)})`);
  const tmp = `${link}.tmp`;
  await rm(tmp, { force: true });
  await symlink(pty, tmp);
  await rename(tmp, link);
  return link;
}

/** Asks the `qemu boot` owning the board (by its QMP socket) to power it on again after the next quit. */
export function requestPowerCycle(qmpSocket: string): void {
  writeFileSync(join(dirname(qmpSocket), POWER_CYCLE_REQUEST), '');
}

/** Whether a power cycle was requested since the last call (the request is consumed). */
export function takePowerCycleRequest(qmpSocket: string): boolean {
  const file = join(dirname(qmpSocket), POWER_CYCLE_REQUEST);
  if (!existsSync(file)) return false;
  rmSync(file, { force: true });
  return true;
}

/** The same board powered on again after its QEMU ended: same disk, ports and run dir. */
export function relaunch(board: QemuBoard, image: QemuImage, runDir: string): Promise<QemuBoard> {
  const { machine, apiUrl, sshPort, overlay, serialPty } = board.info;
  return launch({ image, machine, overlay, runDir, apiPort: Number(new URL(apiUrl).port), sshPort, cleanup: board.cleanup, usbNetRetries: board.nextUsbNetRetries, consolePty: serialPty !== undefined, ...board.emulation });
}

/** Boots a board and resolves once its supervisor answers `/ping` (or its SSH server greets, `readyWhen: 'ssh'`). */
export async function bootBoard(o: BootOptions): Promise<{ board: QemuBoard; ready: ReadyInfo }> {
  const started = Date.now();
  await reapAbandonedBoards();
  const machine = o.machine ?? 'virt';
  const runDir = o.runDir ?? (await mkdtemp(join(tmpdir(), 'fleetlab-qemu-')));
  mkdirSync(runDir, { recursive: true });
  const overlay = o.snapshot ? join(runDir, 'overlay.qcow2') : persistentOverlay(o.image, machine);
  if (!existsSync(overlay)) {
    mkdirSync(join(overlay, '..'), { recursive: true });
    await createOverlay(o.image, overlay);
  }
  const [apiPort, sshPort] = [o.apiPort ?? (await freePort()), o.sshPort ?? (await freePort())];
  o.progress?.(`starting qemu-system-aarch64 -M ${machine} (overlay ${overlay}, serial log ${join(runDir, 'serial.log')})`);
  let board = await launch({
    image: o.image,
    machine,
    overlay,
    runDir,
    apiPort,
    sshPort,
    ...(o.appendExtra ? { appendExtra: o.appendExtra } : {}),
    ...(o.consolePty ? { consolePty: true } : {}),
    ...(o.cpus !== undefined ? { cpus: o.cpus } : {}),
    ...(o.tuning ? { tuning: o.tuning } : {}),
    cleanup: async () => {
      if (o.snapshot) await rm(overlay, { force: true });
      if (!o.runDir) await rm(runDir, { recursive: true, force: true });
    },
  });
  const deadline = started + (o.readyTimeoutMs ?? 900_000);
  try {
    // Not a poll: the waits inside share the deadline; this loop powers a reset board on again.
    for (;;) {
      try {
        const what = o.readyWhen === 'ssh' ? 'the SSH server' : 'the supervisor';
        const alive = () => (board.exitReason ? `${board.exitReason} before ${what} answered; serial console:\n${serialTail(board.info.serialLog)}` : undefined);
        if (o.readyWhen === 'ssh') await waitForSshGreeting(board.info.sshPort, Math.max(0, deadline - Date.now()), alive);
        else await waitForPing(board.info.apiUrl, Math.max(0, deadline - Date.now()), alive);
        break;
      } catch (err) {
        // A reset during the first boot (the USB network watch, the guest's own reboot) is
        // powered on again, as after it.
        if (!board.exitReason || !board.guestReset || Date.now() >= deadline) throw err;
        o.progress?.(`board reset (${board.resetCause}): starting QEMU again`);
        board = await relaunch(board, o.image, runDir);
      }
    }
  } catch (err) {
    await board.stop();
    throw err instanceof FleetlabError && !board.exitReason
      ? new FleetlabError('SUP_ERR_HOST', `${err.message}; serial console:\n${serialTail(board.info.serialLog)}`)
      : err;
  }
  const ready: ReadyInfo = { event: 'ready', ...board.info, pid: board.process.pid ?? 0, bootMs: Date.now() - started };
  return { board, ready };
}
