/**
 * A `fleetlab test --target qemu --workers 2` run (two boards started from the saved ready
 * board) killed the three ways a run is killed: `kill -9` of fleetlab alone, SIGKILL to its
 * whole process group (a CI job's timeout), and Ctrl-C (SIGINT to the group, as a terminal
 * sends it). Nothing of the run may be left running (Playwright, its workers, QEMU, registries:
 * every process carrying the run's session label), and what a SIGKILL of the group leaves on
 * disk (the boards' run dirs and overlays) is removed by the next run when it starts.
 *
 * Skipped, saying why, without a QEMU image in the cache or this checkout's saved ready board:
 * .ci/run builds the image and its virt run saves the board before this file runs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pollUntil } from '../../hil/lib/wait.js';
import { RUN_DIR_PREFIXES } from '../../qemu/boot.js';
import { buildImage, latestImage } from '../../device-image/build.js';
import { findReadyState } from '../../qemu/ready-state.js';
import { READINESS } from '../../hil/targets/qemu/reset-snapshot.js';
import { sessionEnv, sessionProcesses, stopProcesses } from '../../src/processes.js';
import { reportItems, repoRoot, writeTeam } from './board-under-test.js';

/** Directories a qemu run makes in its TMPDIR for what it starts (hil/targets/worker-registry.ts, hil/release/build-engine.ts). */
const OWNED_PREFIXES = [...RUN_DIR_PREFIXES, 'fleetlab-registry-', 'fleetlab-build-engine-'];
/** Two boards from the saved state on a loaded 2-core machine: well under a minute; a boot would be minutes. */
const BOARDS_MS = 240_000;
/** Playwright stops its workers, and they their boards, within its own bounds (30 s for a worker whose runner is gone). */
const STOPPED_MS = 90_000;

/** Each spec file holds its board until the run is killed, once it has said so. */
const HOLD_SPEC = (name: string) => `import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'fleetlab/test';

test('board ${name} is held', async ({ device }) => {
  writeFileSync(join(process.env.FLEETLAB_HOLD_MARKS!, '${name}'), device.target);
  await new Promise((r) => setTimeout(r, 600_000));
});
`;

// This checkout's image: seconds once `qemu build` made it (or any image, whose root filesystem
// it shares); none in the cache at all would be a cold build of minutes, so that is a skip.
const image = latestImage() ? (await buildImage({ repoRoot })).image : undefined;
const ready = image ? await findReadyState(image, 'virt', READINESS) : undefined;
const skipReason = !image
  ? 'no QEMU image in the cache: node bin/fleetlab.js qemu build'
  : !ready
    ? `no saved ready board for image ${image.key}: the qemu target saves one with its first virt board (FLEETLAB_QEMU_MACHINE=virt npm run hil -- --project=qemu)`
    : undefined;
if (skipReason) console.log(`skipped "a qemu run of two boards, killed": ${skipReason}`);

interface Run {
  readonly session: string;
  readonly child: ChildProcess;
  output: string;
  readonly exited: Promise<void>;
  /** Its boards' run dirs (and any registry or build engine dirs), as the run held them. */
  dirs: string[];
}

/** What a pid is, for a failure message: its command line. */
function describePid(pid: number): string {
  try {
    return `pid ${pid}: ${readFileSync(`/proc/${pid}/cmdline`, 'latin1').split('\0').join(' ').trim().slice(0, 160)}`;
  } catch {
    return `pid ${pid}: (gone)`;
  }
}

describe.skipIf(skipReason)('a qemu run of two boards, killed', () => {
  let root: string;
  /** The runs' TMPDIR, shared, as one user's runs share it. */
  let tmp: string;
  const runs: Run[] = [];

  beforeAll(async () => {
    // Short: QEMU's sockets go in a run dir below it (a unix socket path has 107 bytes at most).
    root = await mkdtemp('/tmp/fleetlab-killed-');
    tmp = join(root, 'tmp');
    mkdirSync(tmp, { mode: 0o700 });
    writeTeam(join(root, 'team'), { 'a.spec.ts': HOLD_SPEC('a'), 'b.spec.ts': HOLD_SPEC('b') });
  });

  afterAll(async () => {
    // A failed test's run is stopped here, not left to the next run's reaper.
    await stopProcesses(runs.flatMap((r) => sessionProcesses(r.session)), 5_000);
    if (root) await rm(root, { recursive: true, force: true });
  });

  const ownedDirs = () => readdirSync(tmp).filter((n) => OWNED_PREFIXES.some((p) => n.startsWith(p))).map((n) => join(tmp, n));

  /** Starts a run in a process group of its own (as a shell starts a job) and resolves once both boards are held. */
  async function startRun(name: string, extra: { args?: string[]; env?: Record<string, string> } = {}): Promise<Run> {
    const marks = join(root, `marks-${name}`);
    mkdirSync(marks);
    const session = `killed-run-${name}-${process.pid}`;
    const before = new Set(ownedDirs());
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'fleetlab.js'), 'test', '--target', 'qemu', '--workers', '2', ...(extra.args ?? [])], {
      cwd: join(root, 'team'),
      env: { ...sessionEnv(session), TMPDIR: tmp, FLEETLAB_QEMU_MACHINE: 'virt', FLEETLAB_QEMU_IMAGE_DIR: image!.dir, FLEETLAB_HOLD_MARKS: marks, ...extra.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const run: Run = { session, child, output: '', exited: new Promise((resolve) => child.once('exit', () => resolve())), dirs: [] };
    runs.push(run);
    child.stdout!.on('data', (d: Buffer) => (run.output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (run.output += d.toString()));
    await pollUntil(
      `run ${name}: both boards held (output so far at the end)`,
      async () => {
        if (child.exitCode !== null) throw new Error(`fleetlab test exited with ${child.exitCode}:\n${run.output.slice(-3000)}`);
        return readdirSync(marks);
      },
      (held) => held.length === 2,
      { timeoutMs: BOARDS_MS, intervalMs: 500 },
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}\n--- fleetlab test output:\n${run.output.slice(-3000)}`);
    });
    run.dirs = ownedDirs().filter((d) => !before.has(d));
    expect(run.dirs.filter((d) => d.includes('fleetlab-hil-qemu-')), `run ${name}: a run dir per board`).toHaveLength(2);
    return run;
  }

  /** Resolves once nothing of `run` runs and its dirs are gone; a timeout names each leftover. */
  async function expectNothingLeft(run: Run, how: string): Promise<void> {
    const leftovers = () => [...sessionProcesses(run.session).map(describePid), ...run.dirs.filter((d) => existsSync(d))];
    await pollUntil(`after ${how}, left running or on disk`, async () => leftovers(), (left) => left.length === 0, { timeoutMs: STOPPED_MS, intervalMs: 500 }).catch((err: unknown) => {
      throw new Error(`${String(err)}\n--- fleetlab test output:\n${run.output.slice(-3000)}`);
    });
  }

  it('kill -9 of fleetlab test alone: Playwright stops the run as on Ctrl-C, reads nothing back from the boards, and nothing is left', async () => {
    const report = join(root, 'top-report.json');
    const run = await startRun('top', { args: ['--reporter=list,json'], env: { PLAYWRIGHT_JSON_OUTPUT_NAME: report } });
    process.kill(run.child.pid!, 'SIGKILL');
    await expectNothingLeft(run, 'kill -9 of fleetlab test');
    // An interrupted test is not a failed one: reading its board back (timeline, journal,
    // capture) would keep the boards running half a minute past the interrupt, for a report
    // of devices the person stopped.
    const results = reportItems<{ status?: string; attachments?: Array<{ name?: string }> }>(JSON.parse(readFileSync(report, 'utf8')), 'results');
    expect(results.map((r) => r.status), run.output.slice(-2000)).toEqual(['interrupted', 'interrupted']);
    expect(results.flatMap((r) => (r.attachments ?? []).map((a) => a.name))).toEqual(['step timeline', 'step timeline']);
  }, BOARDS_MS + STOPPED_MS + 30_000);

  it('SIGKILL to its process group: nothing runs, and the next run removes what it left, then stops on Ctrl-C', async () => {
    const killed = await startRun('group');
    process.kill(-killed.child.pid!, 'SIGKILL');
    await killed.exited;
    // Every process of the run is gone at once (QEMU with its worker: setpriv --pdeathsig);
    // its run dirs and overlays are not, as nothing of it ran to remove them.
    await pollUntil('after SIGKILL to the group, processes of the run still running', async () => sessionProcesses(killed.session).map(describePid), (left) => left.length === 0, { timeoutMs: 10_000 });
    const left = killed.dirs.filter((d) => existsSync(d));
    expect(left, 'a SIGKILL of the whole run leaves its run dirs (else this test shows nothing of the reaper)').toEqual(killed.dirs);

    const next = await startRun('next');
    expect(killed.dirs.filter((d) => existsSync(d)), 'what the killed run left, still there once the next run holds its boards').toEqual([]);
    expect(next.output).toMatch(/qemu target: removed what killed runs left: /);

    // Ctrl-C in a terminal: SIGINT to the whole foreground process group.
    process.kill(-next.child.pid!, 'SIGINT');
    await expectNothingLeft(next, 'Ctrl-C (SIGINT to the process group)');
    await next.exited;
    expect(next.child.exitCode, next.output.slice(-2000)).not.toBe(0);
  }, 2 * BOARDS_MS + STOPPED_MS + 60_000);
});
