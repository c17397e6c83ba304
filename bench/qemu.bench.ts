/**
 * The emulated board's costs: `npx tsx bench/qemu.bench.ts [--cold] [--machines raspi3b,virt]`
 *
 * - image build: cached (inputs unchanged: hashing only) and, with --cold, from nothing in a
 *   fresh cache directory (mmdebstrap included: many minutes);
 * - boot to API ready, per machine, from a fresh overlay;
 * - the reset the qemu target does between spec files (over SSH) against a VM snapshot
 *   restore (`savevm`/`loadvm`), where the machine allows a snapshot at all.
 *
 * Suite wall time on qemu against sim: `npx tsx bench/hil-suite.bench.mts sim qemu`.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bootBoard, waitForPing } from '../qemu/boot.js';
import { buildImage, formatBuildProgress } from '../qemu/image/build.js';
import { GUEST } from '../qemu/image/recipe.js';
import type { MachineKind } from '../qemu/qemu-argv.js';
import { QmpClient } from '../qemu/qmp.js';
import { resetScript } from '../hil/targets/qemu.js';
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
  try {
    console.log(`${machine}: boot to API ready ${seconds(ready.bootMs)}`);
    const ssh = new SshDevice({ host: '127.0.0.1', port: ready.sshPort, privateKey: await readFile(image.sshKey) });
    await ssh.waitReachable(120_000);

    // What the qemu target does between spec files.
    const t0 = Date.now();
    const reset = await ssh.run(['sh', '-c', `${resetScript()}\nsystemctl start ${GUEST.unit}`], { timeoutMs: 300_000 });
    if (reset.exitCode !== 0) throw new Error(`reset failed: ${reset.stderr}`);
    await waitForPing(ready.apiUrl, 300_000, () => board.exitReason);
    const resetMs = Date.now() - t0;
    console.log(`${machine}: reset over SSH to API ready ${seconds(resetMs)}   (boot / reset ${(ready.bootMs / resetMs).toFixed(1)}x)`);

    const qmp = await QmpClient.connect({ socketPath: ready.qmpSocket });
    try {
      const t1 = Date.now();
      const saved = await qmp.hmp('savevm fleetlab-ready');
      if (saved.trim()) {
        console.log(`${machine}: snapshot not possible: ${saved.trim()}`);
        continue;
      }
      const saveMs = Date.now() - t1;
      const t2 = Date.now();
      const loaded = await qmp.hmp('loadvm fleetlab-ready');
      if (loaded.trim()) throw new Error(`loadvm: ${loaded.trim()}`);
      await waitForPing(ready.apiUrl, 300_000, () => board.exitReason);
      const restoreMs = Date.now() - t2;
      console.log(`${machine}: savevm ${seconds(saveMs)}, loadvm to API ready ${seconds(restoreMs)}   (reset / restore ${(resetMs / restoreMs).toFixed(1)}x, boot / restore ${(ready.bootMs / restoreMs).toFixed(1)}x)`);
    } finally {
      await qmp.close();
      await ssh.close();
    }
  } finally {
    await board.stop();
  }
}
