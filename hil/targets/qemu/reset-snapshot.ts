/**
 * Reset by snapshot: each spec file gets a new QEMU started from the image's saved ready board
 * (qemu/ready-state.ts), its supervisor already answering in local mode. The first board of an
 * image is reset over SSH, its supervisor started and systemd left to settle, then saved; later
 * runs on the same image start from that save too. Only virt can be saved (QEMU 7.2 cannot
 * migrate raspi3b's usb-net), and a card image always boots: its first boot is part of what
 * it tests. Whatever fails here is said and falls back to a boot and resets over SSH.
 */
import { errorText } from '../../../src/errors.js';
import { freePort } from '../../../src/free-port.js';
import { waitForPing, type QemuBoard } from '../../../qemu/boot.js';
import { findReadyState, RESTORABLE_MACHINES, restoreBoard, saveReadyState, type ReadyState } from '../../../qemu/ready-state.js';
import type { QemuImage } from '../../../device-image/build.js';
import type { MachineKind } from '../../../qemu/qemu-argv.js';
import type { SshDevice } from '../../../device-access/ssh-device.js';
import { resetOverSsh, startSupervisor, waitSettled } from './reset-ssh.js';
import { Agent } from 'undici';
import { storedIdentity } from '../drivers/device-facts.js';
import { httpApiAt } from '../../lib/http.js';
import { GUEST } from '../../../device-image/recipe.js';

/** What a saved ready board has done, in the words its ready.json keeps. */
export const READINESS = 'reset over SSH, supervisor started in local mode and answering /ping, systemd settled, its status read and an empty target refused once (hil/targets/qemu/reset-snapshot.ts)';

/**
 * The device API's first status read and first target, made once before the save: the
 * supervisor builds a route's validator and serializer on its first request (src/http/
 * lazy-schema-compilers.ts), which under TCG takes seconds, and without this every spec file's
 * board, started from the same save, would pay them again in its first deploy. An empty target
 * is refused (400) and changes nothing; a device in the field has long since answered both.
 */
async function askOnce(apiUrl: string, deviceKey: string): Promise<void> {
  // Connections of its own, closed after each answer and destroyed before the save: the saved
  // guest must not hold a connection of this process open.
  const connections = new Agent();
  try {
    const api = httpApiAt(apiUrl, deviceKey, { dispatcher: connections });
    const headers = { connection: 'close' };
    const status = await api.request('GET', '/v2/state/status', { headers });
    const refused = await api.request('POST', '/v2/local/target-state', { body: {}, headers });
    if (status.status !== 200 || refused.status !== 400) throw new Error(`the device API answered its first status read with ${status.status} and an empty target with ${refused.status} (expected 200 and 400)`);
  } finally {
    await connections.destroy();
  }
}

export interface SnapshotResetBindings {
  readonly image: QemuImage;
  readonly machine: MachineKind;
  readonly runDir: () => string;
  /** The board's QEMU now, and SSH to it. */
  readonly board: () => QemuBoard | undefined;
  readonly ssh: () => SshDevice | undefined;
  readonly bootDir: string;
  /** A restored QEMU is the board from now on: SSH pointed at it, the clock set, the LED probed. */
  readonly adopt: (board: QemuBoard) => Promise<void>;
  /** Ends the board's QEMU and its overlay; the run dir, console and SSH client stay. */
  readonly retireBoard: () => Promise<void>;
  /** What samples a QEMU process (the LED probe) lets go before it is saved. */
  readonly releaseProbes: () => void;
  /** How long a restored board may take to answer `/ping`. */
  readonly readyMs: number;
  readonly log: (line: string) => void;
}

export class SnapshotReset {
  /** Off for raspi3b and card images, and from the first failed save or restore on. */
  #usable: boolean;
  /** The saved ready board of this image, once found in the cache or saved from the first boot. */
  #ready: ReadyState | undefined;
  /** The running board was started from the saved state and no spec file has had it yet. */
  #untouched = false;

  constructor(private readonly b: SnapshotResetBindings) {
    this.#usable = RESTORABLE_MACHINES.has(b.machine) && !b.image.bootDir;
  }

  /**
   * Instead of a boot: the board started from the saved state on free ports. False when there
   * is none yet, or it failed (said on stderr): the caller boots.
   */
  async startInsteadOfBoot(): Promise<boolean> {
    if (!this.#usable) return false;
    this.#ready ??= await findReadyState(this.b.image, this.b.machine, READINESS);
    return Boolean(this.#ready) && (await this.#restore(await freePort(), await freePort()));
  }

  /**
   * Between spec files: a fresh device with its supervisor running. False when this board
   * cannot be reset so: the caller resets over SSH (booting first if the board is gone).
   */
  async reset(): Promise<boolean> {
    if (!this.#usable) return false;
    if (this.#untouched) {
      this.#untouched = false;
      return true;
    }
    if (!this.#ready && !(await this.#save())) return false;
    const board = this.b.board();
    const ports = board ? { api: Number(new URL(board.info.apiUrl).port), ssh: board.info.sshPort } : { api: await freePort(), ssh: await freePort() };
    await this.b.retireBoard();
    if (!(await this.#restore(ports.api, ports.ssh))) return false;
    this.#untouched = false;
    return true;
  }

  /** The board started from the saved state on these ports, its supervisor answering; false (said) when it is not. */
  async #restore(apiPort: number, sshPort: number): Promise<boolean> {
    try {
      const board = await restoreBoard({ state: this.#ready!, image: this.b.image, runDir: this.b.runDir(), apiPort, sshPort, consolePty: true });
      await this.b.adopt(board);
      await waitForPing(board.info.apiUrl, this.b.readyMs, () => board.exitReason);
      this.#untouched = true;
      return true;
    } catch (err) {
      this.b.log(`the board did not start from its saved state (${errorText(err)}); booting it instead`);
      this.#usable = false;
      await this.b.retireBoard();
      return false;
    }
  }

  /**
   * The booted board, reset and with its supervisor answering in local mode once systemd has
   * settled, saved as the image's ready state (its QEMU ends). False (said) when it cannot be;
   * a board the failed save left paused runs on.
   */
  async #save(): Promise<boolean> {
    const board = this.b.board();
    const ssh = this.b.ssh();
    if (!board || !ssh) return false;
    try {
      await resetOverSsh(ssh, this.b.bootDir);
      await startSupervisor(ssh, board);
      await waitSettled(ssh);
      await askOnce(board.info.apiUrl, (await storedIdentity(ssh, GUEST.dataDir)).deviceKey);
      await ssh.disconnect();
      this.b.releaseProbes();
      this.#ready = await saveReadyState({ board, image: this.b.image, readiness: READINESS });
      return true;
    } catch (err) {
      this.b.log(`the board could not be saved (${errorText(err)}); resetting it over SSH between spec files`);
      this.#usable = false;
      if (!board.exitReason) await board.qmp.execute('cont').catch(() => undefined);
      return false;
    }
  }
}
