/**
 * The supervisor's start-up on an emulated board, this build against an earlier one, side
 * by side on the same booted machine, and this build without the device's node flags:
 *
 *   npx tsx bench/qemu-start.bench.ts --base <git rev> [--machine raspi3b|virt] [--rounds 3]
 *
 * Builds the image from this checkout (its bundle and unit), and the base's bundle from a
 * git worktree of <rev>. After boot, the unit is stopped; each round then starts it once
 * per candidate (the base through a runtime drop-in that swaps ExecStart for its bundle, run
 * as its own unit did: without node flags), in alternating order, timing `systemctl start`
 * to the first /ping 200 seen from the host. The first round runs with V8's compile cache
 * emptied (a first boot); later rounds use it, as every later start of a device does.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { bootBoard, waitForPing } from '../qemu/boot.js';
import { buildImage } from '../device-image/build.js';
import { DEVICE_NODE_FLAGS } from '../device-image/payload.js';
import { GUEST } from '../device-image/recipe.js';
import { BOARD } from '../device-image/board-layout.js';
import type { MachineKind } from '../qemu/qemu-argv.js';
import { SshDevice } from '../device-access/ssh-device.js';
import { bundleAtRevision } from './supervisor-process.js';

const READY_MS = 600_000;
/** Fine enough for starts of seconds; the default second would round every start up to one. */
const PING_EVERY_MS = 50;
const COMPILE_CACHE = '/var/cache/fleetlab/node-compile-cache';
const DROP_IN_DIR = `/run/systemd/system/${GUEST.unit}.d`;
const BASE_BUNDLE = `${GUEST.appDir}/fleetlab-device-base.mjs`;

const { values } = parseArgs({ options: { base: { type: 'string' }, machine: { type: 'string' }, rounds: { type: 'string' } }, strict: true });
if (!values.base) throw new Error('--base <git rev> is required: the build to compare with (e.g. a commit before a start-up change)');
const machine = (values.machine ?? 'raspi3b') as MachineKind;
if (machine !== 'raspi3b' && machine !== 'virt') throw new Error(`--machine must be raspi3b or virt, got ${machine}`);
const rounds = Number(values.rounds ?? 3);
if (!Number.isInteger(rounds) || rounds < 2) throw new Error(`--rounds must be a whole number of at least 2 (one cold, the rest cached), got ${values.rounds}`);
const repoRoot = new URL('..', import.meta.url).pathname;
const log = (line: string) => process.stderr.write(`bench: ${line}\n`);
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

const work = await mkdtemp(join(tmpdir(), 'fleetlab-bench-qemu-start-'));
try {
  const baseFile = join(work, 'base.mjs');
  const baseCommit = await bundleAtRevision(repoRoot, values.base, baseFile);
  log(`base ${baseCommit} bundled (${baseFile})`);
  const { image } = await buildImage({ repoRoot, progress: (p) => log(`image: ${p.stage} ${p.percent}%`) });
  const { board, ready } = await bootBoard({ image, machine, snapshot: true, readyTimeoutMs: READY_MS, progress: log });
  const ssh = new SshDevice({ host: '127.0.0.1', port: ready.sshPort, privateKey: await readFile(image.sshKey) });
  try {
    log(`${machine}: boot to API ready ${seconds(ready.bootMs)}`);
    await ssh.waitReachable(120_000);
    const must = async (argv: string[], input?: Buffer | string) => {
      const r = await ssh.run(argv, { input, timeoutMs: READY_MS });
      if (r.exitCode !== 0) throw new Error(`${argv.join(' ')}: exit ${r.exitCode}: ${r.stderr.trim()}`);
      return r.stdout;
    };
    await must(['sh', '-c', `cat > ${BASE_BUNDLE}`], await readFile(baseFile));
    // A runtime drop-in that runs `bundle` without node flags in place of the unit's ExecStart.
    const runWithoutFlags = (bundle: string) => ({
      setup: ['sh', '-c', `mkdir -p ${DROP_IN_DIR} && cat > ${DROP_IN_DIR}/bench.conf && systemctl daemon-reload`],
      input: ['[Service]', 'ExecStart=', `ExecStart=${BOARD.node} ${bundle} supervisor --config ${GUEST.configFile}`, ''].join('\n'),
    });
    const candidates = [
      { name: `base ${baseCommit} (no node flags)`, ...runWithoutFlags(BASE_BUNDLE) },
      { name: `this build (${DEVICE_NODE_FLAGS.join(' ')})`, setup: ['sh', '-c', `rm -f ${DROP_IN_DIR}/bench.conf && systemctl daemon-reload`], input: undefined },
      { name: 'this build (no node flags)', ...runWithoutFlags(`${GUEST.appDir}/fleetlab-device.mjs`) },
    ];
    const times = new Map(candidates.map((c) => [c.name, [] as number[]]));
    await must(['systemctl', 'stop', GUEST.unit]);
    for (let round = 0; round < rounds; round++) {
      for (const c of round % 2 ? [...candidates].reverse() : candidates) {
        // Two candidates run the same bundle: each one's first start compiles from nothing.
        if (round === 0) await must(['rm', '-rf', COMPILE_CACHE]);
        await must(c.setup, c.input);
        const t0 = Date.now();
        await must(['systemctl', 'start', GUEST.unit]);
        await waitForPing(board.info.apiUrl, READY_MS, () => board.exitReason, PING_EVERY_MS);
        const ms = Date.now() - t0;
        times.get(c.name)!.push(ms);
        log(`round ${round + 1}/${rounds}${round === 0 ? ' (compile cache empty)' : ''}: ${c.name} ready in ${seconds(ms)}`);
        await must(['systemctl', 'stop', GUEST.unit]);
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
    console.log(`supervisor start on qemu ${machine}: systemctl start to first /ping 200, ${rounds} alternating rounds`);
    for (const c of candidates) {
      const t = times.get(c.name)!;
      console.log(`  ${c.name.padEnd(60)} first start ${seconds(t[0]!)}, cached: median ${seconds(median(t.slice(1)))} (${t.slice(1).map(seconds).join(', ')})`);
    }
    const [base, current] = candidates.map((c) => times.get(c.name)!);
    console.log(`  ratio base / this build (${DEVICE_NODE_FLAGS.join(' ')}): first start ${(base![0]! / current![0]!).toFixed(2)}x, cached ${(median(base!.slice(1)) / median(current!.slice(1))).toFixed(2)}x`);
  } finally {
    await ssh.close();
    await board.stop();
  }
} finally {
  await rm(work, { recursive: true, force: true });
}
