/** The worker's emulated board: booted or restored once, reset between spec files, powered by the harness. */
import { join } from 'node:path';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { freePort } from '../../../src/free-port.js';
import { FleetlabError, errorText } from '../../../src/errors.js';
import { bootBoard, reapAbandonedBoards, relaunch, serialTail, waitForPing, type QemuBoard } from '../../../qemu/boot.js';
import { findReadyState, reapAbandonedSaves, RESTORABLE_MACHINES, restoreBoard, saveReadyState, type ReadyState } from '../../../qemu/ready-state.js';
import type { QemuImage } from '../../../device-image/build.js';
import { GUEST } from '../../../device-image/recipe.js';
import type { MachineKind } from '../../../qemu/qemu-argv.js';
import { ensureBoardTestImages } from '../board-test-images.js';
import { SerialConsole } from '../../../device-access/serial-console.js';
import { PulledImages, reapAbandonedPulls } from '../pulled-images.js';
import { SshDevice } from '../../../device-access/ssh-device.js';
import { QemuGpioLed } from '../drivers/led-qemu-gpio.js';
import { deadlines, QEMU_TIMEOUTS } from '../timeouts.js';
import { BOOT_CONFIG_AS_BOOTED, resetOverSsh, setGuestClock, startSupervisor, waitSettled } from './reset-ssh.js';

const TIMEOUTS = deadlines(QEMU_TIMEOUTS);

/** What a saved ready board has done, in the words its ready.json keeps. */
const READINESS = 'reset over SSH, supervisor started in local mode and answering /ping, systemd settled (hil/targets/qemu/lab.ts)';

/**
 * What runs killed with -9 (or whose workers were) left on this machine: the QEMU of a worker
 * that is gone with its run dir and overlay, the registries and build engines its deploys
 * started, a half-written saved board. Stopped and removed before a board of this run starts;
 * returns what was removed.
 */
export async function reapAbandonedRuns(): Promise<string[]> {
  return [...(await reapAbandonedBoards()), ...(await reapAbandonedPulls()), ...(await reapAbandonedSaves())];
}

/** One emulated board and the harness's handles on it; lives as long as the worker. */
export class QemuLab {
  board: QemuBoard | undefined;
  ssh: SshDevice | undefined;
  /** A team's releases: built for arm64 and pulled by the board from a registry on this host. */
  images: PulledImages | undefined;
  /** The board's LED, watched across its QEMU processes. */
  readonly led: QemuGpioLed;
  /** The console's lines with their times, for a failed test's slice; read through QEMU restarts (its pty link stays put). */
  console: SerialConsole | undefined;
  runDir: string | undefined;
  /** Where `power.off` left the board: QEMU gone, the disk kept for `on`. */
  cut = false;
  /**
   * Whether this board starts each spec file from a saved ready state (virt), rather than
   * being reset over SSH. A card image always boots: its first boot is part of what it tests.
   */
  #restorable: boolean;
  /** The saved ready board of this image, once found in the cache or saved from the first boot. */
  #ready: ReadyState | undefined;
  /** The running board was started from the saved state and no spec file has had it yet. */
  #untouched = false;
  /** The loopback port `ssh` reaches the board on: the same across restores, new with a boot. */
  #sshPort: number | undefined;
  /** Set while QEMU is started again after a guest reset; `waitUp` waits for it. */
  #relaunching: Promise<void> | undefined;
  #relaunchError: string | undefined;
  /** Told of each new QEMU of the same board (a reset, a power cycle): what lives in a QEMU process is set up again. */
  readonly #relaunchWatchers = new Set<(board: QemuBoard) => Promise<void>>();

  constructor(
    readonly image: QemuImage,
    readonly machine: MachineKind,
  ) {
    this.#restorable = RESTORABLE_MACHINES.has(machine) && !image.bootDir;
    this.led = new QemuGpioLed(machine);
    // A worker that exits without closing (killed by a timeout) must not leave QEMU running.
    process.once('exit', () => this.board?.process.kill('SIGKILL'));
  }

  get running(): boolean {
    return Boolean(this.board && !this.board.exitReason);
  }

  async boot(): Promise<void> {
    await this.shutdown();
    const reaped = await reapAbandonedRuns();
    if (reaped.length) process.stderr.write(`qemu target: removed what killed runs left: ${reaped.join(', ')}\n`);
    this.runDir = await mkdtemp(join(tmpdir(), 'fleetlab-hil-qemu-'));
    this.images = new PulledImages();
    if (this.#restorable) {
      this.#ready ??= await findReadyState(this.image, this.machine);
      if (this.#ready && (await this.#restore(await freePort(), await freePort()))) return;
    }
    // The console on a pty as well as in the log: read with arrival times, as a lab board's adapter is.
    const { board } = await bootBoard({ image: this.image, machine: this.machine, snapshot: true, runDir: this.runDir, readyTimeoutMs: TIMEOUTS.boot, consolePty: true });
    await this.#adopt(board);
    await this.afterBoot();
    if (this.image.bootDir) {
      // A card image is a lab's board: no test app images of the harness's, and a config.txt the firmware needs.
      await ensureBoardTestImages(this.ssh!, (line) => process.stderr.write(`qemu target: ${line}\n`));
      await this.ssh!.run(['sh', '-c', `mkdir -p /run/fleetlab && cp ${this.image.bootDir}/config.txt ${BOOT_CONFIG_AS_BOOTED}`]);
    }
  }

  /** A new QEMU as this lab's board: its console read, its reboots followed, SSH pointed at it. */
  async #adopt(board: QemuBoard): Promise<void> {
    this.board = board;
    this.led.forget();
    // The pty link stays put across QEMU processes: one reader for the lab's life.
    this.console ??= board.info.serialPty ? new SerialConsole(board.info.serialPty, 115200) : undefined;
    this.#followResets(board);
    if (this.ssh && this.#sshPort === board.info.sshPort) return;
    await this.ssh?.close().catch(() => undefined);
    this.ssh = new SshDevice({ host: '127.0.0.1', port: board.info.sshPort, username: 'root', privateKey: await readFile(this.image.sshKey) });
    this.#sshPort = board.info.sshPort;
  }

  /**
   * The board started from the saved ready state on these ports, its supervisor answering.
   * False, with the reason on stderr, when that fails: the caller boots instead, and this lab
   * resets over SSH from then on.
   */
  async #restore(apiPort: number, sshPort: number): Promise<boolean> {
    try {
      const board = await restoreBoard({ state: this.#ready!, image: this.image, runDir: this.runDir!, apiPort, sshPort, consolePty: true });
      await this.#adopt(board);
      await this.afterBoot();
      await waitForPing(board.info.apiUrl, TIMEOUTS.ready, () => board.exitReason);
      this.#untouched = true;
      return true;
    } catch (err) {
      process.stderr.write(`qemu target: the board did not start from its saved state (${errorText(err)}); booting it instead\n`);
      this.#restorable = false;
      await this.#retireBoard();
      return false;
    }
  }

  /**
   * The booted board, reset and with its supervisor answering in local mode once systemd has
   * settled, saved as the image's ready state (its QEMU ends). False, with the reason on
   * stderr, when it cannot be: this lab then resets over SSH.
   */
  async #save(): Promise<boolean> {
    const board = this.board!;
    const ssh = this.ssh!;
    try {
      await resetOverSsh(ssh, this.bootDir);
      await startSupervisor(ssh, board);
      await waitSettled(ssh);
      await ssh.disconnect();
      this.led.retire();
      this.#ready = await saveReadyState({ board, image: this.image, readiness: READINESS });
      return true;
    } catch (err) {
      process.stderr.write(`qemu target: the board could not be saved (${errorText(err)}); resetting it over SSH between spec files\n`);
      this.#restorable = false;
      // A failed save may leave the machine paused (or gone): running again, or booted again.
      if (board.exitReason) await this.boot();
      else await board.qmp.execute('cont').catch(() => undefined);
      return false;
    }
  }

  /** Ends the current QEMU and removes its overlay; the lab's run dir, console and SSH stay. */
  async #retireBoard(): Promise<void> {
    this.led.retire();
    await this.ssh?.disconnect().catch(() => undefined);
    await this.board?.stop().catch(() => undefined);
    this.board = undefined;
  }

  /** Where config.txt and system-proxy/ are on this board's image. */
  get bootDir(): string {
    return this.image.bootDir ?? GUEST.bootDir;
  }

  /** QEMU again on the same disk and ports after `quit` (power restored). */
  async powerOn(): Promise<void> {
    if (!this.runDir || !this.board) throw new FleetlabError('SUP_ERR_HOST', 'power on: this board was never booted');
    this.board = await relaunch(this.board, this.image, this.runDir);
    this.#followResets(this.board);
    this.cut = false;
    await this.#relaunched(this.board);
    await this.waitUp();
  }

  /** Calls `watcher` with each new QEMU of this board from now on, until the returned function is called. */
  watchRelaunches(watcher: (board: QemuBoard) => Promise<void>): () => void {
    this.#relaunchWatchers.add(watcher);
    return () => void this.#relaunchWatchers.delete(watcher);
  }

  async #relaunched(board: QemuBoard): Promise<void> {
    for (const watcher of this.#relaunchWatchers) {
      await watcher(board).catch((err: unknown) => process.stderr.write(`qemu target: after the board's QEMU started again: ${errorText(err)}\n`));
    }
  }

  /**
   * The lab's power switch turned on. A board that is up stays up; one halting itself
   * (POST /v1/shutdown) keeps its QEMU until the guest has powered off, and is then off like
   * a cut one; a reset is powered on again by #followResets.
   */
  async switchOn(): Promise<void> {
    const board = this.board;
    if (!board) throw new FleetlabError('SUP_ERR_HOST', 'power on: this board was never booted');
    if (!board.exitReason) {
      const up = await waitForPing(board.info.apiUrl, TIMEOUTS.boot, () => board.exitReason).then(() => true, () => false);
      if (up) return this.afterBoot();
      if (!board.exitReason) throw new FleetlabError('SUP_ERR_HOST', `power on: the board neither answered nor powered off within ${TIMEOUTS.boot / 1000} s; serial console:\n${serialTail(board.info.serialLog)}`);
    }
    if (board.guestReset) return this.waitUp();
    await this.powerOn();
  }

  /**
   * A reboot, from any source (login1, the API's reboot, the watchdog), ends QEMU (it runs
   * with -no-reboot, see qemu/qemu-argv.ts); the board is then powered on again here, like
   * hardware coming out of reset.
   */
  #followResets(board: QemuBoard): void {
    void board.exited.then(() => {
      if (!board.guestReset || this.board !== board || !this.runDir) return;
      // The launcher's own power cycle (a dead USB network) is news; a reboot is not.
      if (board.powerAgainCause) process.stderr.write(`qemu target: board reset (${board.powerAgainCause}): starting QEMU again\n`);
      this.#relaunching = (async () => {
        this.led.retire();
        this.board = await relaunch(board, this.image, this.runDir!);
        this.#followResets(this.board);
        await this.#relaunched(this.board);
      })()
        .catch((err: unknown) => void (this.#relaunchError = `starting QEMU again after the guest's reset failed: ${String(err)}`))
        .finally(() => (this.#relaunching = undefined));
    });
  }

  /** After any boot: the API answers, SSH works, the clock is the harness's, the LED is watched. */
  async waitUp(): Promise<void> {
    const url = this.board!.info.apiUrl;
    // The same ports across a relaunch: only a board that is gone for good ends the wait.
    await waitForPing(url, TIMEOUTS.boot, () => {
      if (this.#relaunchError) return this.#relaunchError;
      const board = this.board!;
      if (!board.exitReason || board.guestReset) return undefined;
      return `${board.exitReason}; serial console:\n${serialTail(board.info.serialLog)}`;
    });
    await this.#relaunching;
    await this.afterBoot();
  }

  async afterBoot(): Promise<void> {
    await this.ssh!.waitReachable(TIMEOUTS.ready);
    // No RTC: the boot set the clock from the kernel command line; make it exact.
    await setGuestClock(this.ssh!);
    // The probe samples through resets and reboots; a new QEMU process needs a new one.
    this.led.follow(this.board!.qmp);
  }

  /**
   * Between spec files: the board as a fresh device. Resolves with whether its supervisor is
   * running (a board started from the ready state) or stopped (reset over SSH).
   */
  async reset(): Promise<'running' | 'stopped'> {
    if (this.#restorable && this.#untouched) {
      this.#untouched = false;
      return 'running';
    }
    if (this.#restorable && (this.#ready || (await this.#save()))) {
      const ports = this.board ? { api: Number(new URL(this.board.info.apiUrl).port), ssh: this.board.info.sshPort } : { api: await freePort(), ssh: await freePort() };
      await this.#retireBoard();
      if (await this.#restore(ports.api, ports.ssh)) {
        this.#untouched = false;
        return 'running';
      }
    }
    if (!this.running) await this.boot();
    await resetOverSsh(this.ssh!, this.bootDir);
    return 'stopped';
  }

  async quit(): Promise<void> {
    await this.board?.quit();
    this.led.retire();
    this.cut = true;
  }

  async shutdown(): Promise<void> {
    this.led.retire();
    await this.console?.close();
    this.console = undefined;
    await this.images?.close().catch(() => undefined);
    this.images = undefined;
    await this.ssh?.close().catch(() => undefined);
    await this.board?.stop().catch(() => undefined);
    if (this.runDir) await rm(this.runDir, { recursive: true, force: true });
    this.board = undefined;
    this.ssh = undefined;
  }
}

