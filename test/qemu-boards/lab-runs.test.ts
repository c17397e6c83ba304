/**
 * A lab of two emulated boards shared by three `fleetlab test --target board --lab` runs at
 * once: each Playwright worker leases a board of its own (hil/lab/worker-lease.ts), a run
 * killed with SIGKILL (its whole process group, as a CI job is killed) frees its board within
 * the lease's time to live, the others wait in the queue and then finish, and neither the
 * lease log nor the specs' own record shows two runs on one board at once.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { openLab } from '../../hil/lab/lab-command.js';
import type { LeaseLogEntry } from '../../hil/lab/lease-store.js';
import { boardConfigFor } from '../../hil/lab/board-config-for-qemu.js';
import type { QemuBoard } from '../../qemu/boot.js';
import { buildImage } from '../../device-image/build.js';
import { labBoard, repoRoot, writeTeam } from './board-under-test.js';

const TTL_S = 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What each spec of the team's suite records: which run, which board, when. */
const SPEC = (name: string) => `import { appendFileSync } from 'node:fs';
import { expect, test } from 'fleetlab/test';

test('${name}: the board answers as one device all along', async ({ device }) => {
  const start = Date.now();
  const first = await device.api.request('GET', '/v1/device');
  expect(first.status).toBe(200);
  await new Promise((r) => setTimeout(r, Number(process.env.FLEETLAB_PROOF_HOLD_MS)));
  const again = await device.api.request('GET', '/v1/device');
  expect(again.status).toBe(200);
  appendFileSync(process.env.FLEETLAB_PROOF_LOG!, JSON.stringify({ run: process.env.FLEETLAB_PROOF_RUN, board: process.env.FLEETLAB_LAB_BOARD, spec: '${name}', start, end: Date.now() }) + '\\n');
});
`;

interface Run {
  readonly name: string;
  readonly child: ChildProcess;
  output: string;
  readonly done: Promise<number | null>;
}

describe('three fleetlab test runs share a lab of two QEMU boards', () => {
  const boards: QemuBoard[] = [];
  const runs: Run[] = [];
  let dir: string;
  let labFile: string;
  let proofLog: string;

  /** `holdMs`: how long each spec keeps its board busy (C's outlasts the moment it is killed). */
  const startRun = (name: string, extra: string[], holdMs = 3000): Run => {
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'fleetlab.js'), 'test', '--target', 'board', '--lab', labFile, '--tag', 'virt', ...extra], {
      cwd: join(dir, 'team'),
      env: { ...process.env, FLEETLAB_PROOF_RUN: name, FLEETLAB_PROOF_LOG: proofLog, FLEETLAB_PROOF_HOLD_MS: String(holdMs), FLEETLAB_BOARD_CONFIG: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: killed as a CI job is, Playwright and its workers with it.
      detached: true,
    });
    const run: Run = { name, child, output: '', done: new Promise((resolve) => child.once('exit', (code) => resolve(code))) };
    child.stdout!.on('data', (d: Buffer) => (run.output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (run.output += d.toString()));
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-runs-'));
    const { image } = await buildImage({ repoRoot });
    const progress = (line: string) => console.error(`lab-runs: ${line}`);
    const booted = await Promise.all(['a', 'b'].map((n) => labBoard(image, join(dir, `qemu-${n}`), progress)));
    boards.push(...booted.map((b) => b.board));
    const cli = [process.execPath, join(repoRoot, 'bin', 'fleetlab.js')];
    labFile = join(dir, 'fleetlab.lab.yaml');
    writeFileSync(labFile, stringify({
      leases: { store: `sqlite:${join(dir, 'leases.db')}`, ttlSeconds: TTL_S },
      boards: booted.map((b, i) => ({ name: `qemu-${'ab'[i]}`, tags: ['virt'], ...boardConfigFor(b.ready, cli) })),
    }));
    writeTeam(join(dir, 'team'), { 'one.spec.ts': SPEC('one'), 'two.spec.ts': SPEC('two') });
    proofLog = join(dir, 'proof.jsonl');
    writeFileSync(proofLog, '');
  }, 900_000);

  afterAll(async () => {
    for (const r of runs) if (r.child.exitCode === null && r.child.signalCode === null) process.kill(-r.child.pid!, 'SIGKILL');
    await Promise.all(boards.map((b) => b.stop()));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('gives every worker a board to itself, frees a killed run\'s board within the time to live, and all other runs finish', async () => {
    const open = await openLab(labFile);
    try {
      // C first, alone: it takes a board, then A (two workers) and B (one) want both.
      const c = startRun('C', ['--workers=1'], 600_000);
      const deadline = Date.now() + 300_000;
      while ((await open.store.current()).size === 0) {
        expect(c.child.exitCode, `run C ended before it leased a board:\n${c.output}`).toBeNull();
        expect(Date.now(), `run C never leased a board:\n${c.output}`).toBeLessThan(deadline);
        await sleep(500);
      }
      const cBoard = [...(await open.store.current()).values()][0]!;
      const a = startRun('A', []);
      const b = startRun('B', ['--workers=1']);
      // Both of A's workers, or one and B, now hold or wait; C dies holding its board.
      while ((await open.store.current()).size < 2) {
        expect(a.child.exitCode ?? b.child.exitCode, `a run ended before the second board was taken:\n${a.output}\n${b.output}`).toBeNull();
        expect(Date.now(), `runs A and B never took the second board:\n${a.output}\n${b.output}`).toBeLessThan(deadline + 300_000);
        await sleep(500);
      }
      const killedAt = Date.now();
      process.kill(-c.child.pid!, 'SIGKILL');
      expect(await c.done).toBeNull();

      const [aCode, bCode] = await Promise.all([a.done, b.done]);
      expect(aCode, a.output).toBe(0);
      expect(bCode, b.output).toBe(0);
      expect(a.output).toMatch(/2 passed/);
      expect(b.output).toMatch(/2 passed/);
      expect(a.output + b.output).toMatch(/waiting, \d+ ahead in the queue|next in line/);

      // The lease log: one holder at a time per board; C's lease lapsed, and the board went on within the time to live.
      const log = await open.store.history();
      const leases = new Map<string, { board: string; holder: string; from: number; to?: number; end?: LeaseLogEntry['event'] }>();
      for (const e of log) {
        if (e.event === 'acquired') leases.set(e.lease, { board: e.board, holder: e.holder, from: e.at });
        else Object.assign(leases.get(e.lease)!, { to: e.at, end: e.event });
      }
      const all = [...leases.values()];
      // For the CI log: the lease log as `fleetlab lab log` would print it, relative to the kill.
      console.log(log.map((e) => `${((e.at - killedAt) / 1000).toFixed(1).padStart(7)} s  ${e.board}  ${e.event.padEnd(8)}  ${e.holder}`).join('\n'));
      expect(all.every((l) => l.to !== undefined), JSON.stringify(all)).toBe(true);
      for (const board of ['qemu-a', 'qemu-b']) {
        const held = all.filter((l) => l.board === board).sort((x, y) => x.from - y.from);
        for (let i = 1; i < held.length; i++) expect(held[i]!.from, `${board}: ${JSON.stringify(held)}`).toBeGreaterThanOrEqual(held[i - 1]!.to!);
      }
      const cLease = leases.get(cBoard.lease)!;
      expect(cLease.end).toBe('expired');
      const next = all.filter((l) => l.board === cBoard.board && l.from > cLease.from).sort((x, y) => x.from - y.from)[0]!;
      expect(next.from - killedAt).toBeLessThanOrEqual(TTL_S * 1000 + 5000);
      // 1 lease of C, 2 of A (one per worker), 1 of B.
      expect(all).toHaveLength(4);

      // The specs' own record: on each board, one spec at a time.
      const proof = readFileSync(proofLog, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { run: string; board: string; start: number; end: number });
      expect(proof.filter((p) => p.run !== 'C')).toHaveLength(4);
      for (const board of ['qemu-a', 'qemu-b']) {
        const on = proof.filter((p) => p.board === board).sort((x, y) => x.start - y.start);
        for (let i = 1; i < on.length; i++) expect(on[i]!.start, `${board}: ${JSON.stringify(on)}`).toBeGreaterThanOrEqual(on[i - 1]!.end);
      }
    } finally {
      await open.close();
    }
  });
});
