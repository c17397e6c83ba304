/**
 * The emulated board's costs: `npx tsx bench/qemu.bench.ts [--cold] [--machines raspi3b,virt]`
 *
 * - image build: cached (inputs unchanged: hashing only) and, with --cold, from nothing in a
 *   fresh cache directory (mmdebstrap included: many minutes);
 * - boot to API ready, per machine, from a fresh overlay;
 * - how the qemu target gives each spec file a fresh device, to the supervisor answering:
 *   a reset over SSH (raspi3b's way), and, where the machine can be saved (virt), a new QEMU
 *   started from the image's saved ready state (qemu/ready-state.ts): the save once, then
 *   restores in alternating rounds with SSH resets (--rounds N, default 3).
 *
 * Suite wall time on qemu against sim: `npx tsx bench/hil-suite.bench.mts sim qemu`.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bootBoard, waitForPing } from '../qemu/boot.js';
import { buildImage, formatBuildProgress } from '../device-image/build.js';
import type { MachineKind } from '../qemu/qemu-argv.js';
import { RESTORABLE_MACHINES, restoreBoard, saveReadyState } from '../qemu/ready-state.js';
import { resetOverSsh, startSupervisor } from '../hil/targets/qemu/reset-ssh.js';
import { freePort } from '../src/free-port.js';
import { SshDevice } from '../device-access/ssh-device.js';

const args = process.argv.slice(2);
const cold = args.includes('--cold');
const machinesArg = args[args.indexOf('--machines') + 1];
const machines = (args.includes('--machines') && machinesArg ? machinesArg.split(',') : ['raspi3b', 'virt']) as MachineKind[];
const rounds = args.includes('--rounds') ? Number(args[args.indexOf('--rounds') + 1]) : 3;
const repoRoot = new URL('..', import.meta.url).pathname;
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

if (cold) {
  const cacheDir = await mkdtemp(join(tmpdir(), 'fleetlab-bench-qemu-cache-'));
  try {
    const r = await buildImage({ repoRoot, cacheDir, progress: (e) => process.stderr.write(`  ${formatBuildProgress(e)}\n`) });
    console.log(`image build, cold: ${seconds(r.totalMs)} (root filesystem ${seconds(r.image.manifest.timings.rootfsMs)}, payload + SD card ${seconds(r.image.manifest.timings.imageMs)})`);
  } finally {
    await rm(cacheDir, { recursive: true, force: true });
  }
}
await buildImage({ repoRoot });
const cached = await buildImage({ repoRoot });
console.log(`image build, cached (unchanged inputs): ${seconds(cached.totalMs)}`);
const image = cached.image;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

for (const machine of machines) {
  const { board, ready } = await bootBoard({ image, machine, snapshot: true, readyTimeoutMs: 600_000 });
  const ssh = new SshDevice({ host: '127.0.0.1', port: ready.sshPort, privateKey: await readFile(image.sshKey) });
  const sshResetMs: number[] = [];
  const restoreMs: number[] = [];
  const runDir = await mkdtemp(join(tmpdir(), 'fleetlab-bench-restore-'));
  try {
    console.log(`${machine}: boot to API ready ${seconds(ready.bootMs)}`);
    await ssh.waitReachable(120_000);
    const sshReset = async () => {
      const t0 = Date.now();
      await resetOverSsh(ssh);
      await startSupervisor(ssh, board);
      sshResetMs.push(Date.now() - t0);
    };
    await sshReset();
    if (!RESTORABLE_MACHINES.has(machine)) {
      for (let i = 1; i < rounds; i++) await sshReset();
      console.log(`${machine}: reset over SSH to API ready, median of ${sshResetMs.length}: ${seconds(median(sshResetMs))}   (boot / reset ${(ready.bootMs / median(sshResetMs)).toFixed(1)}x); cannot be saved`);
      continue;
    }
    // The save is the one-off cost of the first board of an image; the bench's own cache keeps it apart from the user's.
    const cacheDir = await mkdtemp(join(tmpdir(), 'fleetlab-bench-ready-'));
    await ssh.disconnect();
    const t1 = Date.now();
    const state = await saveReadyState({ board, image, readiness: 'bench: reset over SSH, supervisor answering', cacheDir });
    console.log(`${machine}: save of the ready state ${seconds(Date.now() - t1)}`);
    // Alternating: a restore, then an SSH reset on the restored board (its supervisor stopped, wiped, started).
    let restored;
    try {
      for (let i = 0; i < rounds; i++) {
        await restored?.stop();
        const t2 = Date.now();
        restored = await restoreBoard({ state, image, runDir, apiPort: await freePort(), sshPort: await freePort() });
        await waitForPing(restored.info.apiUrl, 120_000, () => restored!.exitReason, 50);
        restoreMs.push(Date.now() - t2);
        const onRestored = new SshDevice({ host: '127.0.0.1', port: restored.info.sshPort, privateKey: await readFile(image.sshKey) });
        try {
          await onRestored.waitReachable(120_000);
          const t3 = Date.now();
          await resetOverSsh(onRestored);
          await startSupervisor(onRestored, restored);
          sshResetMs.push(Date.now() - t3);
        } finally {
          await onRestored.close();
        }
      }
    } finally {
      await restored?.stop();
      await rm(cacheDir, { recursive: true, force: true });
    }
    const r = median(restoreMs);
    const s = median(sshResetMs);
    console.log(`${machine}: from the restore's start to the first /ping, median of ${restoreMs.length}: ${seconds(r)} (${restoreMs.map(seconds).join(', ')})`);
    console.log(`${machine}: reset over SSH to API ready, median of ${sshResetMs.length}: ${seconds(s)} (${sshResetMs.map(seconds).join(', ')})`);
    console.log(`${machine}: reset / restore ${(s / r).toFixed(1)}x, boot / restore ${(ready.bootMs / r).toFixed(1)}x`);
  } finally {
    await ssh.close();
    await board.stop();
    await rm(runDir, { recursive: true, force: true });
  }
}
