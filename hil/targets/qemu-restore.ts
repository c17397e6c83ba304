/**
 * Boards started from a saved ready state (qemu/ready-state.ts) outside the qemu target's own
 * labs: the lab tests' supervised boards and `fleetlab qemu boot --snapshot`'s (bare or not).
 * A restored board runs on in the instant it was saved, with that instant's clock and no RTC
 * to read a newer one from: its clock is set from this host's over SSH, as NTP would on a Pi.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { bootBoard, waitForPing, type QemuBoard, type ReadyInfo } from '../../qemu/boot.js';
import type { QemuImage } from '../../device-image/build.js';
import { findReadyState, restoreBoard, saveReadyState, type ReadyState } from '../../qemu/ready-state.js';
import { errorText } from '../../src/errors.js';
import { freePort } from '../../src/free-port.js';
import { setGuestClock, waitSettled } from './qemu/reset-ssh.js';
import { READINESS } from './qemu/reset-snapshot.js';
import { SshDevice } from '../../device-access/ssh-device.js';

/** Past a restore, a board answers within seconds; this bounds a machine that is heavily loaded. */
const RESTORED_READY_MS = 120_000;

export interface RestoreOptions {
  readonly state: ReadyState;
  readonly image: QemuImage;
  readonly runDir: string;
  /** What must answer before the board counts as ready: the supervisor, or only SSH (a bare board). */
  readonly readyWhen: 'api' | 'ssh';
  readonly apiPort?: number;
  readonly sshPort?: number;
  readonly consolePty?: boolean;
}

/** A board from `state`, answering and with this host's time; stopped again if it is not. */
export async function startRestored(o: RestoreOptions): Promise<{ board: QemuBoard; ready: ReadyInfo }> {
  const started = Date.now();
  mkdirSync(o.runDir, { recursive: true });
  const board = await restoreBoard({
    state: o.state,
    image: o.image,
    runDir: o.runDir,
    apiPort: o.apiPort ?? (await freePort()),
    sshPort: o.sshPort ?? (await freePort()),
    ...(o.consolePty ? { consolePty: true } : {}),
  });
  const ssh = new SshDevice({ host: '127.0.0.1', port: board.info.sshPort, username: 'root', privateKey: readFileSync(o.image.sshKey) });
  try {
    if (o.readyWhen === 'api') await waitForPing(board.info.apiUrl, RESTORED_READY_MS, () => board.exitReason);
    await ssh.waitReachable(RESTORED_READY_MS);
    await setGuestClock(ssh);
  } catch (err) {
    await board.stop();
    throw err;
  } finally {
    await ssh.close();
  }
  return { board, ready: { event: 'ready', ...board.info, pid: board.process.pid ?? 0, bootMs: Date.now() - started } };
}

/** A virt board on a throwaway overlay in `runDir`, from its image's saved state when there is one. */
export interface SavedBoardOptions {
  readonly image: QemuImage;
  readonly runDir: string;
  readonly apiPort?: number;
  readonly sshPort?: number;
  readonly consolePty?: boolean;
  readonly progress: (line: string) => void;
}

/**
 * A supervised virt board on a throwaway overlay, in `runDir`: started from the image's saved
 * ready board when the qemu target has saved one (seconds), booted otherwise (half a minute to
 * a minute under TCG). The saved board is a fresh boot's twin but for its uptime: nothing of a
 * run's is on it, and its clock is set from this host's. A state that fails to start is said
 * and booted around.
 */
export async function startSupervisedBoard(o: SavedBoardOptions): Promise<{ board: QemuBoard; ready: ReadyInfo }> {
  const boot = () => bootBoard({ image: o.image, machine: 'virt', snapshot: true, runDir: o.runDir, progress: o.progress, ...pick(o) });
  const state = await findReadyState(o.image, 'virt', READINESS);
  if (!state) {
    o.progress(`no saved ready board for image ${o.image.key}: booting`);
    return boot();
  }
  try {
    const started = await startRestored({ ...pick(o), state, image: o.image, runDir: o.runDir, readyWhen: 'api' });
    o.progress(`started from the saved ready board ${state.dir} in ${started.ready.bootMs} ms`);
    return started;
  } catch (err) {
    o.progress(`the board did not start from its saved ready state (${errorText(err)}); booting it instead`);
    return boot();
  }
}

/** What a saved bare board has done, in the words its ready.json keeps. */
const BARE_READINESS = 'booted to SSH, systemd settled; nothing of fleetlab\'s on it (hil/targets/qemu-restore.ts)';

/**
 * A bare virt board (the image without anything of fleetlab's, for `fleetlab board install`) on
 * a throwaway overlay, in `runDir`: from the image's saved state when there is one (seconds),
 * else booted (about half a minute under TCG) and saved settled for the next time, then started from
 * that state. A bare board holds nothing a run leaves, so the saved one is a fresh boot's twin
 * but for its uptime. Whatever fails about the state is said and booted around.
 */
export async function startBareBoard(o: SavedBoardOptions): Promise<{ board: QemuBoard; ready: ReadyInfo }> {
  const restore = (state: ReadyState) => startRestored({ ...o, state, readyWhen: 'ssh' });
  const boot = () => bootBoard({ image: o.image, machine: 'virt', snapshot: true, readyWhen: 'ssh', runDir: o.runDir, progress: o.progress, ...pick(o) });
  const saved = await findReadyState(o.image, 'virt', BARE_READINESS);
  if (saved) {
    try {
      const started = await restore(saved);
      o.progress(`started from the saved bare board ${saved.dir} in ${started.ready.bootMs} ms`);
      return started;
    } catch (err) {
      o.progress(`the bare board did not start from its saved state (${errorText(err)}); booting it instead`);
      return boot();
    }
  }
  o.progress(`no saved bare board for image ${o.image.key}: booting, then saving it settled for the next run`);
  const booted = await boot();
  const ssh = new SshDevice({ host: '127.0.0.1', port: booted.board.info.sshPort, username: 'root', privateKey: readFileSync(o.image.sshKey) });
  let state: ReadyState;
  try {
    await waitSettled(ssh);
    await ssh.close();
    state = await saveReadyState({ board: booted.board, image: o.image, readiness: BARE_READINESS });
  } catch (err) {
    await ssh.close();
    o.progress(`the bare board could not be saved (${errorText(err)}); booting it again`);
    await booted.board.stop();
    return boot();
  }
  o.progress(`saved the settled bare board as ${state.dir}; starting it from there`);
  // The save ended that QEMU (its overlay is the saved disk now); its ports are free again.
  return restore(state).catch((err: unknown) => {
    o.progress(`the bare board did not start from the state just saved (${errorText(err)}); booting it again`);
    return boot();
  });
}

function pick(o: { apiPort?: number; sshPort?: number; consolePty?: boolean }): { apiPort?: number; sshPort?: number; consolePty?: boolean } {
  return {
    ...(o.apiPort !== undefined ? { apiPort: o.apiPort } : {}),
    ...(o.sshPort !== undefined ? { sshPort: o.sshPort } : {}),
    ...(o.consolePty ? { consolePty: true } : {}),
  };
}
