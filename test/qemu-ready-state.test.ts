/**
 * Ready boards from a saved state (qemu/ready-state.ts), on a real QEMU: a virt machine whose
 * "kernel" is two instructions (wait for an interrupt, branch back), so a save and a restore
 * take seconds here. The HIL qemu target does the same with the supervised image on every run.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { createOverlay, launch, reapAbandonedBoards } from '../qemu/boot.js';
import type { QemuImage } from '../device-image/build.js';
import { findReadyState, qemuVersion, readyStateKey, restoreBoard, saveReadyState } from '../qemu/ready-state.js';
import { freePort } from '../src/free-port.js';
import { alive } from '../src/processes.js';
import { pollUntil } from '../hil/lib/wait.js';

const work = mkdtempSync(join(tmpdir(), 'fleetlab-ready-state-test-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A bare-metal loop as the kernel (wfi; b .-4) and a small raw disk: all QEMU needs to run a virt machine. */
function tinyImage(key: string): QemuImage {
  const dir = join(work, `image-${key}`);
  mkdirSync(dir, { recursive: true });
  const kernel = join(dir, 'vmlinuz');
  const loop = Buffer.alloc(8);
  loop.writeUInt32LE(0xd503207f, 0);
  loop.writeUInt32LE(0x17ffffff, 4);
  writeFileSync(kernel, loop);
  writeFileSync(join(dir, 'initrd.img'), Buffer.alloc(16));
  writeFileSync(join(dir, 'sd.img'), Buffer.alloc(1024 * 1024));
  return { key, dir, sdImage: join(dir, 'sd.img'), kernel, initrd: join(dir, 'initrd.img'), dtb: '', sshKey: '', manifest: {} as QemuImage['manifest'] };
}

async function bootTiny(image: QemuImage, name: string) {
  const runDir = join(work, name);
  mkdirSync(runDir, { recursive: true });
  const overlay = join(runDir, 'overlay.qcow2');
  await createOverlay(image, overlay);
  return launch({ image, machine: 'virt', overlay, runDir, apiPort: await freePort(), sshPort: await freePort(), cleanup: async () => rmSync(overlay, { force: true }) });
}

describe('the ready state key', () => {
  const image = tinyImage('a');

  it('is the same for the same image, machine, QEMU and readiness, and differs when any of them does', () => {
    const key = readyStateKey(image, 'virt', 'QEMU 7.2', 'settled');
    expect(readyStateKey(image, 'virt', 'QEMU 7.2', 'settled')).toBe(key);
    expect(readyStateKey({ ...image, key: 'b' }, 'virt', 'QEMU 7.2', 'settled')).not.toBe(key);
    expect(readyStateKey(image, 'virt', 'QEMU 8.2', 'settled')).not.toBe(key);
    // The kernel's root= is part of the machine a card image boots.
    expect(readyStateKey({ ...image, root: 'LABEL=fleetlab-root' }, 'virt', 'QEMU 7.2', 'settled')).not.toBe(key);
    // A board saved further along (its API asked once) is another state.
    expect(readyStateKey(image, 'virt', 'QEMU 7.2', 'settled, API asked')).not.toBe(key);
    // A board of one vCPU (FLEETLAB_QEMU_CPUS=1) is another machine; two spelled out is the default's.
    expect(readyStateKey(image, 'virt', 'QEMU 7.2', 'settled', 1)).not.toBe(key);
    expect(readyStateKey(image, 'virt', 'QEMU 7.2', 'settled', 2)).toBe(key);
  });
});

describe('saving a running board and starting new ones from it', () => {
  const image = tinyImage('saved');
  const LOOP = 'test: a loop';
  const cacheDir = join(work, 'cache');

  it('saves the machine whole, finds it again, and starts a board from it on other ports, running', async () => {
    // A save killed halfway left a staging directory whose process is gone: the next save removes it.
    const root = join(cacheDir, 'qemu', 'ready');
    mkdirSync(join(root, '.staging-999999999-abc'), { recursive: true });
    expect(await findReadyState(image, 'virt', LOOP, cacheDir)).toBeUndefined();
    expect(await findReadyState(image, 'raspi3b', LOOP, cacheDir)).toBeUndefined();

    const board = await bootTiny(image, 'first');
    const state = await saveReadyState({ board, image, readiness: LOOP, cacheDir });
    expect(board.exitReason).toBeDefined(); // its QEMU ended with the save
    expect(existsSync(state.disk) && existsSync(state.state)).toBe(true);
    expect(state.meta).toMatchObject({ imageKey: 'saved', machine: 'virt', readiness: LOOP, qemu: await qemuVersion() });
    expect(readdirSync(root).filter((n) => n.startsWith('.staging-'))).toEqual([]);
    expect((await findReadyState(image, 'virt', LOOP, cacheDir))?.dir).toBe(state.dir);

    for (const name of ['second', 'third']) {
      const runDir = join(work, name);
      mkdirSync(runDir, { recursive: true });
      const restored = await restoreBoard({ state, image, runDir, apiPort: await freePort(), sshPort: await freePort() });
      try {
        expect(await restored.qmp.execute<{ status: string }>('query-status')).toMatchObject({ status: 'running' });
      } finally {
        await restored.stop();
      }
      expect(existsSync(join(runDir, 'overlay.qcow2'))).toBe(false);
    }
  }, 120_000);

  it('keeps the state another worker saved first, and drops its own', async () => {
    const first = await findReadyState(image, 'virt', LOOP, cacheDir);
    const board = await bootTiny(image, 'late');
    const late = await saveReadyState({ board, image, readiness: LOOP, cacheDir });
    expect(late.dir).toBe(first!.dir);
    expect(late.meta.savedAt).toBe(first!.meta.savedAt);
    expect(readdirSync(join(cacheDir, 'qemu', 'ready')).filter((n) => n.startsWith('.staging-'))).toEqual([]);
  }, 120_000);

  it('removes the states of images the image cache has pruned, at the next save', async () => {
    const gone = tinyImage('pruned');
    const pruned = await saveReadyState({ board: await bootTiny(gone, 'pruned'), image: gone, readiness: 'test: its image goes', cacheDir });
    rmSync(gone.dir, { recursive: true, force: true });
    const kept = await findReadyState(image, 'virt', LOOP, cacheDir);
    const other = tinyImage('other');
    await saveReadyState({ board: await bootTiny(other, 'other'), image: other, readiness: 'test: a later save', cacheDir });
    expect(existsSync(pruned.dir)).toBe(false);
    expect(existsSync(kept!.dir)).toBe(true);
  }, 120_000);

  it('refuses raspi3b, whose usb-net QEMU cannot migrate', async () => {
    // Refused before the board is touched: only its machine is read.
    const raspi = { info: { machine: 'raspi3b' } } as unknown as Parameters<typeof saveReadyState>[0]['board'];
    await expect(saveReadyState({ board: raspi, image, readiness: 'x', cacheDir })).rejects.toThrow(/raspi3b cannot be saved/);
  });
});

describe('a board whose launcher was killed with -9', () => {
  /** A tiny image and a run dir for `name` under a root the reaper is pointed at, removed after the test. */
  function reapable(name: string): { image: QemuImage; root: string; runDir: string } {
    // Short: QEMU's sockets go in the run dir, and a unix socket path has 107 bytes at most.
    const root = mkdtempSync('/tmp/fleetlab-reap-');
    onTestFinished(() => rmSync(root, { recursive: true, force: true }));
    const runDir = join(root, `fleetlab-qemu-${name}`);
    mkdirSync(runDir);
    return { image: tinyImage(name), root, runDir };
  }

  it('ends with its launcher, and the next boot removes the run dir it left', async () => {
    const { image, root, runDir } = reapable('orphan');
    const script = `
      import { createOverlay, launch } from ${JSON.stringify(new URL('../qemu/boot.ts', import.meta.url).pathname)};
      const image = ${JSON.stringify(image)};
      const overlay = ${JSON.stringify(join(runDir, 'overlay.qcow2'))};
      await createOverlay(image, overlay);
      const board = await launch({ image, machine: 'virt', overlay, runDir: ${JSON.stringify(runDir)}, apiPort: ${await freePort()}, sshPort: ${await freePort()} });
      console.log(board.process.pid);
      setInterval(() => {}, 1000);`;
    const launcher = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const qemuPid = await new Promise<number>((resolve, reject) => {
      launcher.stdout.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
      launcher.once('exit', (code) => reject(new Error(`the launcher exited ${code} before QEMU started`)));
    });
    const exited = new Promise((r) => launcher.once('exit', r));
    launcher.kill('SIGKILL');
    await exited;
    // The kernel signals QEMU when its launcher dies (setpriv --pdeathsig): nothing of it runs on.
    await pollUntil(`QEMU (pid ${qemuPid}) ending with its launcher`, async () => alive(qemuPid), (running) => !running, { timeoutMs: 15_000, intervalMs: 100 });
    expect(JSON.parse(readFileSync(join(runDir, 'owner.json'), 'utf8'))).toMatchObject({ pid: qemuPid });
    expect(existsSync(join(runDir, 'overlay.qcow2'))).toBe(true);

    expect(await reapAbandonedBoards(root)).toEqual([runDir]);
    expect(existsSync(runDir)).toBe(false);
  }, 60_000);

  it('still running (QEMU started where setpriv is missing) is stopped by the next boot', async () => {
    const { image, root, runDir } = reapable('unowned');
    const overlay = join(runDir, 'overlay.qcow2');
    await createOverlay(image, overlay);
    const board = await launch({ image, machine: 'virt', overlay, runDir, apiPort: await freePort(), sshPort: await freePort() });
    onTestFinished(() => board.quit());
    // Its owner file now names a launcher that is gone (pid 2^22 + 1 is above Linux's pid_max).
    const owner = JSON.parse(readFileSync(join(runDir, 'owner.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(runDir, 'owner.json'), JSON.stringify({ ...owner, owner: 4_194_305, ownerStart: undefined }));
    expect(await reapAbandonedBoards(root)).toEqual([runDir]);
    expect(alive(board.process.pid!)).toBe(false);
    expect(existsSync(runDir)).toBe(false);
  }, 60_000);
});
