/**
 * `power.cycle`, `power.off`, `power.on` on an emulated board, through QEMU itself: a cut is
 * QMP `quit` (QEMU gone, its disk kept), power on is a new QEMU on the same disk and ports. A
 * reboot from inside the guest (login1, the API's reboot, the watchdog) ends QEMU, which runs
 * with -no-reboot (qemu/qemu-argv.ts), and is powered on again here, like hardware coming out
 * of reset: a new QEMU process, because an in-place system_reset leaves raspi3b's usb-net dead.
 */
import { FleetlabError, errorText } from '../../../src/errors.js';
import { relaunch, serialTail, waitForPing, type QemuBoard } from '../../../qemu/boot.js';
import type { QemuImage } from '../../../device-image/build.js';
import type { PowerProtocol } from '../../../device-access/protocols.js';

export interface QmpPowerBindings {
  readonly image: QemuImage;
  /** Where the board's QEMU keeps its sockets, log and overlay; undefined before a boot. */
  readonly runDir: () => string | undefined;
  /** The board's QEMU now; undefined before a boot. */
  readonly board: () => QemuBoard | undefined;
  /** A new QEMU is the board from now on. */
  readonly replace: (board: QemuBoard) => void;
  /** What samples a QEMU process (the LED probe) lets go of one that is ending. */
  readonly releaseProbes: () => void;
  /** After any boot: SSH, the clock, the LED probe. */
  readonly afterBoot: () => Promise<void>;
  /** How long a boot may take to answer `/ping`. */
  readonly bootMs: number;
  readonly log: (line: string) => void;
}

export class QmpPower {
  /** Where `off` left the board: QEMU gone, the disk kept for `on`. */
  cut = false;
  /** Set while QEMU is started again after a guest reset; `waitUp` waits for it. */
  #relaunching: Promise<void> | undefined;
  #relaunchError: string | undefined;
  /** Told of each new QEMU of the same board (a reset, a power cycle): what lives in a QEMU process is set up again. */
  readonly #watchers = new Set<(board: QemuBoard) => Promise<void>>();

  constructor(private readonly b: QmpPowerBindings) {}

  /** The hard power actions, as the device's `power` protocol has them. */
  protocol(): Omit<PowerProtocol, 'reboot'> {
    return {
      cycle: async () => {
        await this.quit();
        await this.#powerOn();
      },
      off: () => this.quit(),
      on: () => this.#switchOn(),
    };
  }

  /** Calls `watcher` with each new QEMU of this board from now on, until the returned function is called. */
  watchRelaunches(watcher: (board: QemuBoard) => Promise<void>): () => void {
    this.#watchers.add(watcher);
    return () => void this.#watchers.delete(watcher);
  }

  /** A new QEMU is powered: followed, and powered on again when it ends by the guest's own reset. */
  follow(board: QemuBoard): void {
    this.cut = false;
    void board.exited.then(() => {
      const runDir = this.b.runDir();
      if (!board.guestReset || this.b.board() !== board || !runDir) return;
      // The launcher's own power cycle (a dead USB network) is news; a reboot is not.
      if (board.powerAgainCause) this.b.log(`board reset (${board.powerAgainCause}): starting QEMU again`);
      this.#relaunching = (async () => {
        this.b.releaseProbes();
        await this.#started(await relaunch(board, this.b.image, runDir));
      })()
        .catch((err: unknown) => void (this.#relaunchError = `starting QEMU again after the guest's reset failed: ${String(err)}`))
        .finally(() => (this.#relaunching = undefined));
    });
  }

  /** After any boot or reset: the API answers, and what `afterBoot` sets up is done. */
  async waitUp(): Promise<void> {
    const url = this.#current('wait for it').info.apiUrl;
    // The same ports across a relaunch: only a board that is gone for good ends the wait.
    await waitForPing(url, this.b.bootMs, () => {
      if (this.#relaunchError) return this.#relaunchError;
      const board = this.b.board()!;
      if (!board.exitReason || board.guestReset) return undefined;
      return `${board.exitReason}; serial console:\n${serialTail(board.info.serialLog)}`;
    });
    await this.#relaunching;
    await this.b.afterBoot();
  }

  async quit(): Promise<void> {
    await this.b.board()?.quit();
    this.b.releaseProbes();
    this.cut = true;
  }

  async #started(board: QemuBoard): Promise<void> {
    this.b.replace(board);
    this.follow(board);
    for (const watcher of this.#watchers) {
      await watcher(board).catch((err: unknown) => this.b.log(`after the board's QEMU started again: ${errorText(err)}`));
    }
  }

  #current(what: string): QemuBoard {
    const board = this.b.board();
    if (!board || !this.b.runDir()) throw new FleetlabError('SUP_ERR_HOST', `power: cannot ${what}: this board was never booted`);
    return board;
  }

  /** QEMU again on the same disk and ports after `quit` (power restored). */
  async #powerOn(): Promise<void> {
    const board = this.#current('power it on');
    await this.#started(await relaunch(board, this.b.image, this.b.runDir()!));
    await this.waitUp();
  }

  /**
   * The lab's power switch turned on. A board that is up stays up; one halting itself
   * (POST /v1/shutdown) keeps its QEMU until the guest has powered off, and is then off like
   * a cut one; a reset is powered on again by `follow`.
   */
  async #switchOn(): Promise<void> {
    const board = this.#current('power it on');
    if (!board.exitReason) {
      const up = await waitForPing(board.info.apiUrl, this.b.bootMs, () => board.exitReason).then(() => true, () => false);
      if (up) return this.b.afterBoot();
      if (!board.exitReason) throw new FleetlabError('SUP_ERR_HOST', `power on: the board neither answered nor powered off within ${this.b.bootMs / 1000} s; serial console:\n${serialTail(board.info.serialLog)}`);
    }
    if (board.guestReset) return this.waitUp();
    await this.#powerOn();
  }
}
