/**
 * The emulated board's costs: `npx tsx bench/qemu.bench.ts [--cold] [--machines raspi3b,virt]`
 *
 * - image build: cached (inputs unchanged: hashing only) and, with --cold, from nothing in a
 *   fresh cache directory (mmdebstrap included: many minutes);
 * - boot to API ready, per machine, from a fresh overlay;
 * - the two resets the qemu target does between spec files, each to the supervisor answering
 *   again: over SSH, and a restore of the snapshot saved after the first one (`savevm`/
 *   `loadvm`), where the machine allows a snapshot at all.
 *
 * Suite wall time on qemu against sim: `npx tsx bench/hil-suite.bench.mts sim qemu`.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bootBoard } from '../qemu/boot.js';
import { buildImage, formatBuildProgress } from '../qemu/image/build.js';
import type { MachineKind } from '../qemu/qemu-argv.js';
import { resetOverSsh, restoreResetSnapshot, saveResetSnapshot, startSupervisor } from '../hil/targets/qemu.js';
import { SshDevice } from '../hil/targets/ssh-device.js';

const args = process.argv.slice(2);
const cold = args.includes('--cold');
const machinesArg = args[args.indexOf('--machines') + 1];
const machines = (args.includes('--machines') && machinesArg ? machinesArg.split(',') : ['raspi3b', 'virt']) as MachineKind[];
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

for (const machine of machines) {
  const { board, ready } = await bootBoard({ image, machine, snapshot: true, readyTimeoutMs: 600_000 });
  const ssh = new SshDevice({ host: '127.0.0.1', port: ready.sshPort, privateKey: await readFile(image.sshKey) });
  try {
    console.log(`${machine}: boot to API ready ${seconds(ready.bootMs)}`);
    await ssh.waitReachable(120_000);

    const t0 = Date.now();
    await resetOverSsh(ssh);
    await startSupervisor(ssh, board);
    const resetMs = Date.now() - t0;
    console.log(`${machine}: reset over SSH to API ready ${seconds(resetMs)}   (boot / reset ${(ready.bootMs / resetMs).toFixed(1)}x)`);

    // As the target: the first reset is saved, later ones restore it.
    await resetOverSsh(ssh);
    const t1 = Date.now();
    const refused = await saveResetSnapshot(board, ssh);
    if (refused) {
      console.log(`${machine}: snapshot not possible: ${refused}`);
      continue;
    }
    const saveMs = Date.now() - t1;
    const t2 = Date.now();
    await restoreResetSnapshot(board, ssh);
    await startSupervisor(ssh, board);
    const restoreMs = Date.now() - t2;
    console.log(`${machine}: savevm ${seconds(saveMs)}; restore (loadvm, SSH, clock, supervisor start) to API ready ${seconds(restoreMs)}   (reset / restore ${(resetMs / restoreMs).toFixed(1)}x, boot / restore ${(ready.bootMs / restoreMs).toFixed(1)}x)`);
  } finally {
    await ssh.close();
    await board.stop();
  }
}
