/** The worker's emulated board: booted or restored once, reset between spec files, powered by the harness. */
import { join } from 'node:path';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { bootBoard, reapAbandonedBoards, type QemuBoard } from '../../../qemu/boot.js';
import { reapAbandonedSaves } from '../../../qemu/ready-state.js';
import type { QemuImage } from '../../../device-image/build.js';
import { GUEST } from '../../../device-image/recipe.js';
import type { MachineKind } from '../../../qemu/qemu-argv.js';
import { ensureBoardTestImages } from '../board-test-images.js';
import { SerialConsole } from '../../../device-access/serial-console.js';
import { PulledImages, reapAbandonedPulls } from '../pulled-images.js';
import { SshDevice, type SshDeviceOptions } from '../../../device-access/ssh-device.js';
import { QemuGpioLed } from '../drivers/led-qemu-gpio.js';
import { deadlines, QEMU_TIMEOUTS } from '../timeouts.js';
import { QmpPower } from '../drivers/power-qmp.js';
import { BOOT_CONFIG_AS_BOOTED, resetOverSsh, setGuestClock } from './reset-ssh.js';
import { SnapshotReset } from './reset-snapshot.js';

const TIMEOUTS = deadlines(QEMU_TIMEOUTS);

/**
 * What runs killed with -9 (or whose workers were) left on this machine: the QEMU of a worker
 * that is gone with its run dir and overlay, the registries and build engines its deploys
 * started, a half-written saved board. Stopped and removed before a board of this run starts;
 * returns what was removed.
 */
export async function reapAbandonedRuns(): Promise<string[]> {
  return [...(await reapAbandonedBoards()), ...(await reapAbandonedPulls()), ...(await reapAbandonedSaves())];
}

/**
 * One emulated board and the harness's handles on it; lives as long as the worker. Composed
 * of its drivers: power through QMP (../drivers/power-qmp.ts), the LED through the GPIO
 * register (../drivers/led-qemu-gpio.ts), a reset by snapshot (./reset-snapshot.ts) where the
 * machine can be saved and over SSH (./reset-ssh.ts) where it cannot.
 */
export class QemuLab {
  board: QemuBoard | undefined;
  ssh: SshDevice | undefined;
  /** A team's releases: built for arm64 and pulled by the board from a registry on this host. */
  images: PulledImages | undefined;
  /** The board's LED, watched across its QEMU processes. */
  readonly led: QemuGpioLed;
  readonly power: QmpPower;
  /** The console's lines with their times, for a failed test's slice; read through QEMU restarts (its pty link stays put). */
  console: SerialConsole | undefined;
  runDir: string | undefined;
  readonly #snapshots: SnapshotReset;
  /** The loopback port `ssh` reaches the board on: the same across restores, new with a boot. */
  #sshPort: number | undefined;
  #sshKey: Buffer | undefined;

  constructor(
    readonly image: QemuImage,
    readonly machine: MachineKind,
  ) {
    this.led = new QemuGpioLed(machine);
    const log = (line: string) => process.stderr.write(`qemu target: ${line}\n`);
    this.power = new QmpPower({
      image,
      runDir: () => this.runDir,
      board: () => this.board,
      replace: (board) => void (this.board = board),
      releaseProbes: () => this.led.retire(),
      afterBoot: () => this.afterBoot(),
      bootMs: TIMEOUTS.boot,
      log,
    });
    this.#snapshots = new SnapshotReset({
      image,
      machine,
      runDir: () => this.runDir!,
      board: () => this.board,
      ssh: () => this.ssh,
      bootDir: this.bootDir,
      adopt: async (board) => {
        await this.#adopt(board);
        await this.afterBoot();
      },
      retireBoard: () => this.#retireBoard(),
      releaseProbes: () => this.led.retire(),
      readyMs: TIMEOUTS.ready,
      log,
    });
    // A worker that exits without closing (killed by a timeout) must not leave QEMU running.
    process.once('exit', () => this.board?.process.kill('SIGKILL'));
  }

  get running(): boolean {
    return Boolean(this.board && !this.board.exitReason);
  }

  /** Where `power.off` left the board: QEMU gone, the disk kept for `on`. */
  get cut(): boolean {
    return this.power.cut;
  }

  async boot(): Promise<void> {
    await this.shutdown();
    const reaped = await reapAbandonedRuns();
    if (reaped.length) process.stderr.write(`qemu target: removed what killed runs left: ${reaped.join(', ')}\n`);
    this.runDir = await mkdtemp(join(tmpdir(), 'fleetlab-hil-qemu-'));
    this.images = new PulledImages();
    if (await this.#snapshots.startInsteadOfBoot()) return;
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
    this.power.follow(board);
    if (this.ssh && this.#sshPort === board.info.sshPort) return;
    await this.ssh?.close().catch(() => undefined);
    this.#sshKey ??= await readFile(this.image.sshKey);
    this.ssh = new SshDevice(this.#sshOptions(board, this.#sshKey));
    this.#sshPort = board.info.sshPort;
  }

  /** Where the board answers SSH now, for a second session of its own (the timeline's observer); undefined while it is off. */
  sshOptions(): SshDeviceOptions | undefined {
    return this.board && this.#sshKey && !this.cut && !this.board.exitReason ? this.#sshOptions(this.board, this.#sshKey) : undefined;
  }

  #sshOptions(board: QemuBoard, privateKey: Buffer): SshDeviceOptions {
    return { host: '127.0.0.1', port: board.info.sshPort, username: 'root', privateKey };
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

  /** After any boot: the API answers, SSH works, the clock is the harness's, the LED is watched. */
  waitUp(): Promise<void> {
    return this.power.waitUp();
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
    if (await this.#snapshots.reset()) return 'running';
    if (!this.running) await this.boot();
    await resetOverSsh(this.ssh!, this.bootDir);
    return 'stopped';
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
