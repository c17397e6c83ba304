/**
 * Ready boards from a saved state. A board is booted once per image and brought to ready by
 * its caller (the harness: supervisor answering, system settled); its RAM and devices are then
 * saved as a migration stream and its disk kept as a frozen qcow2 overlay. Every later board of
 * that image is a new QEMU that streams the state in over its own overlay on that disk: ready
 * in seconds, where a boot under TCG takes a minute or more. Only `virt`: QEMU 7.2 cannot
 * migrate raspi3b's usb-net, so raspi3b always boots.
 *
 * A saved machine only fits a QEMU that is built and configured as the one that saved it, so
 * the state is kept under a key that hashes the image, QEMU's version and the machine's command
 * line with its host-side values (ports, sockets, logs, the boot's epoch) left out. Under
 * `<cache>/qemu/ready/<key>/`: `disk.qcow2` (backed by the image's sd.img; never written again),
 * `state` (the stream) and `ready.json`, written last, so a directory without it was never
 * finished. A save is staged apart and renamed into place whole: a killed save leaves only a
 * staging directory, which the next save removes once its process is gone.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { FleetlabError } from '../src/errors.js';
import { alive } from '../src/processes.js';
import type { QemuImage } from '../device-image/build.js';
import { boardCpus, buildQemuArgv, type MachineKind } from './qemu-argv.js';
import { createQcow2Overlay, launch, pollBoard, reapAbandonedBoards, type QemuBoard } from './boot.js';
import { cacheRoot, needTool, qemuTools } from '../device-image/tools.js';

/** Machines whose state QEMU can save and load. */
export const RESTORABLE_MACHINES: ReadonlySet<MachineKind> = new Set(['virt']);

/** Saving or loading ~450 MB of guest RAM: seconds on an idle machine, far more on a loaded one. */
const MIGRATION_MS = 300_000;
const STAGING_PREFIX = '.staging-';

export interface ReadyState {
  readonly dir: string;
  readonly disk: string;
  readonly state: string;
  readonly meta: ReadyMeta;
}

export interface ReadyMeta {
  readonly key: string;
  readonly imageKey: string;
  readonly imageDir: string;
  readonly machine: MachineKind;
  readonly qemu: string;
  readonly savedAt: string;
  /** What the board did before it was saved (the caller's words), for whoever reads the cache. */
  readonly readiness: string;
}

/** QEMU's version line: a saved machine loads only into the QEMU that saved it. */
export async function qemuVersion(): Promise<string> {
  const r = await execa(needTool(qemuTools.qemuSystem), ['--version'], { reject: false });
  return r.stdout.split('\n')[0]?.trim() || 'unknown';
}

/**
 * The key of `image`'s saved state on `machine`: the command line as `launch` builds it, with
 * placeholders where a run's own values go, so two runs that would build the same machine
 * share one state, and what the board did before its save (`readiness`), so a fleetlab that
 * saves its board further along does not start from one saved by an older one. Pure.
 */
export function readyStateKey(image: QemuImage, machine: MachineKind, qemu: string, readiness: string, cpus?: number): string {
  const argv = buildQemuArgv({
    machine,
    ...(cpus !== undefined ? { cpus } : {}),
    kernel: image.kernel,
    initrd: image.initrd,
    ...(machine === 'raspi3b' ? { dtb: image.dtb } : {}),
    disk: '/run/disk.qcow2',
    ...(image.root ? { root: image.root } : {}),
    hostfwd: { api: { host: 1, guest: 48484 }, ssh: { host: 2, guest: 22 } },
    qmpSocket: '/run/qmp.sock',
    userQmpSocket: '/run/qmp-user.sock',
    serialLog: '/run/serial.log',
    consolePty: true,
    noReboot: true,
    epochSeconds: 0,
  });
  return createHash('sha256').update(JSON.stringify({ image: image.key, machine, qemu, argv, readiness })).digest('hex').slice(0, 16);
}

function readyRoot(cacheDir: string): string {
  return join(cacheDir, 'qemu', 'ready');
}

/** The saved state for `image` on `machine` that did `readiness` before its save, if one was finished. */
export async function findReadyState(image: QemuImage, machine: MachineKind, readiness: string, cacheDir: string = cacheRoot()): Promise<ReadyState | undefined> {
  if (!RESTORABLE_MACHINES.has(machine)) return undefined;
  // The vCPUs a board started now gets (boot.ts launch), which a restore must match.
  const dir = join(readyRoot(cacheDir), readyStateKey(image, machine, await qemuVersion(), readiness, boardCpus(process.env)));
  return readState(dir);
}

function readState(dir: string): ReadyState | undefined {
  const metaFile = join(dir, 'ready.json');
  if (!existsSync(metaFile)) return undefined;
  try {
    const meta = JSON.parse(readFileSync(metaFile, 'utf8')) as ReadyMeta;
    return { dir, disk: join(dir, 'disk.qcow2'), state: join(dir, 'state'), meta };
  } catch {
    return undefined;
  }
}

/**
 * The file a QEMU `exec:` migration reads or writes: QEMU hands the command to /bin/sh, so the
 * path is single-quoted, and a path that cannot be is refused rather than run.
 */
function shellPath(path: string): string {
  if (/['\n]/.test(path)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `a saved board state cannot live at a path with a quote or newline: ${JSON.stringify(path)}; set FLEETLAB_CACHE_DIR to a plain path`);
  return `'${path}'`;
}

/** Polls QMP `query-migrate` until the stream is done; fails with QEMU's reason or on the deadline. */
async function migrationDone(board: QemuBoard, what: string): Promise<void> {
  let failure: string | undefined;
  await pollBoard(
    async () => {
      const s = await board.qmp.execute<{ status?: string; 'error-desc'?: string }>('query-migrate');
      if (s.status === 'failed' || s.status === 'cancelled') failure = s['error-desc'] ?? s.status;
      return s.status === 'completed';
    },
    `${what} did not finish`,
    MIGRATION_MS,
    () => failure ?? board.exitReason,
    50,
  );
}

/**
 * Saves a running board of `image` as its ready state and ends its QEMU (the board is gone
 * afterwards: restore one with `restoreBoard`). The board must run on a throwaway overlay of
 * the image (`bootBoard({ snapshot: true })`): that overlay becomes the frozen disk. When
 * another process saved the same state first, its state is kept and this one dropped.
 */
export async function saveReadyState(o: { board: QemuBoard; image: QemuImage; readiness: string; cacheDir?: string }): Promise<ReadyState> {
  const { board, image } = o;
  const machine = board.info.machine;
  if (!RESTORABLE_MACHINES.has(machine)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${machine} cannot be saved: QEMU 7.2 cannot migrate its usb-net`);
  const root = readyRoot(o.cacheDir ?? cacheRoot());
  await mkdir(root, { recursive: true });
  await removeAbandonedStaging(root);
  await removeOrphanedStates(root);
  const qemu = await qemuVersion();
  const key = readyStateKey(image, machine, qemu, o.readiness, board.emulation.cpus);
  const staging = await mkdtemp(join(root, `${STAGING_PREFIX}${process.pid}-`));
  try {
    await board.qmp.execute('stop');
    await board.qmp.execute('migrate', { uri: `exec:cat > ${shellPath(join(staging, 'state'))}` });
    await migrationDone(board, 'saving the board');
    await board.quit();
    await rename(board.info.overlay, join(staging, 'disk.qcow2'));
    const meta: ReadyMeta = { key, imageKey: image.key, imageDir: image.dir, machine, qemu, savedAt: new Date().toISOString(), readiness: o.readiness };
    await writeFile(join(staging, 'ready.json'), `${JSON.stringify(meta, null, 2)}\n`);
    const dir = join(root, key);
    // Another worker may have saved the same machine meanwhile, and boards may be running on
    // its disk: keep it. A directory without ready.json is a save that never finished.
    const saved = readState(dir);
    if (saved) {
      await rm(staging, { recursive: true, force: true });
      return saved;
    }
    await rm(dir, { recursive: true, force: true });
    const renamed = await rename(staging, dir).then(() => true, (err: unknown) => {
      if (!readState(dir)) throw err;
      return false; // saved by another worker between the check and the rename
    });
    if (!renamed) await rm(staging, { recursive: true, force: true });
    return readState(dir)!;
  } catch (err) {
    await rm(staging, { recursive: true, force: true });
    throw err;
  }
}

/** Staging directories of saves whose process is gone (killed mid-save); returns those removed. */
async function removeAbandonedStaging(root: string): Promise<string[]> {
  const removed: string[] = [];
  for (const name of existsSync(root) ? readdirSync(root) : []) {
    if (!name.startsWith(STAGING_PREFIX)) continue;
    const pid = Number(name.slice(STAGING_PREFIX.length).split('-')[0]);
    if (Number.isInteger(pid) && pid > 0 && alive(pid)) continue;
    await rm(join(root, name), { recursive: true, force: true });
    removed.push(join(root, name));
  }
  return removed;
}

/** The half-written saves (each a board's RAM and disk) of processes killed mid-save, removed; returns those removed. */
export function reapAbandonedSaves(cacheDir: string = cacheRoot()): Promise<string[]> {
  return removeAbandonedStaging(readyRoot(cacheDir));
}

/**
 * States whose image the image cache has pruned (it keeps the newest two, device-image/build.ts):
 * their disk is backed by that image, so nothing can start from them again.
 */
async function removeOrphanedStates(root: string): Promise<void> {
  for (const name of readdirSync(root)) {
    const state = name.startsWith(STAGING_PREFIX) ? undefined : readState(join(root, name));
    if (state && !existsSync(state.meta.imageDir)) await rm(state.dir, { recursive: true, force: true });
  }
}

/**
 * A new board started from `state`: its own overlay on the frozen disk in `runDir`, the state
 * streamed in, the CPUs running. Resolves once QEMU runs the loaded machine; the guest's clock
 * is still the saved one (the caller sets it: the board has no RTC to read it from).
 */
export async function restoreBoard(o: {
  state: ReadyState;
  image: QemuImage;
  runDir: string;
  apiPort: number;
  sshPort: number;
  consolePty?: boolean;
}): Promise<QemuBoard> {
  await reapAbandonedBoards();
  const overlay = join(o.runDir, 'overlay.qcow2');
  await rm(overlay, { force: true });
  await createQcow2Overlay(overlay, { file: o.state.disk, format: 'qcow2' });
  const board = await launch({
    image: o.image,
    machine: o.state.meta.machine,
    overlay,
    runDir: o.runDir,
    apiPort: o.apiPort,
    sshPort: o.sshPort,
    incoming: true,
    ...(o.consolePty ? { consolePty: true } : {}),
    cleanup: () => rm(overlay, { force: true }),
  });
  try {
    await board.qmp.execute('migrate-incoming', { uri: `exec:cat ${shellPath(o.state.state)}` });
    await migrationDone(board, `loading the saved board ${o.state.dir}`);
    await board.qmp.execute('cont');
    return board;
  } catch (err) {
    await board.stop();
    const qemuLog = existsSync(join(o.runDir, 'qemu.log')) ? readFileSync(join(o.runDir, 'qemu.log'), 'utf8').trim() : '';
    throw new FleetlabError('SUP_ERR_HOST', `starting a board from its saved state (${o.state.dir}) failed: ${err instanceof Error ? err.message : String(err)}${qemuLog ? `; QEMU said: ${qemuLog}` : ''}`);
  }
}
