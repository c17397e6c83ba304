/**
 * `fleetlab sweep` (issue 41): where its points land (pure), what it refuses before any device
 * starts, and a real sweep on the sim target over dockerd that catches a fragile app the
 * project has never seen (fixtures/apps/fragile: its v2 refuses to start after a migration a power
 * cut interrupted), with the broken point breaking again when run alone by its id.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FAULTS, planPoints, parseFaults, parsePointId, phaseAt, type Fault, type UpdateWindow } from '../hil/sweep/points.js';
import { checkSweepInput, targetDevices, type SweepCommandOptions } from '../hil/harness/sweep-command.js';
import type { TargetDriver } from '../hil/targets/target-driver.js';
import { sweepSimTarget } from './helpers/sweep-target.js';
import { requireFaults, runSweep } from '../hil/sweep/sweep.js';
import { QEMU_CAPABILITIES } from '../hil/targets/qemu/under-test.js';
import { sweepSummary, sweepTable } from '../hil/sweep/report.js';
import { readBundle } from '../hil/capture/bundle.js';
import { replayOnSim } from '../hil/capture/replay.js';
import { until } from '../src/wait.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const FROM = 'fixtures/apps/fragile/compose.yaml';
const TO = 'fixtures/apps/fragile/compose.v2.yaml';
const window: UpdateWindow = { phases: [{ phase: 'download', startMs: 0 }, { phase: 'stop-old', startMs: 100 }, { phase: 'start-new', startMs: 300 }, { phase: 'first-seconds', startMs: 600 }], totalMs: 5600 };

describe('sweep points', () => {
  it('gives every phase its share, the rest by length, one point per equal slice of a phase, the same for the same seed', () => {
    const points = planPoints({ window, faults: ['power-cut', 'supervisor-kill'], count: 8, seed: 42 });
    // 8 points, 4 phases: a floor of 1 each, the other 4 by length (100, 200, 300 and 5000 ms): 1, 1, 1, 5.
    expect(points.map((p) => p.phase)).toEqual(['download', 'stop-old', 'start-new', ...Array<string>(5).fill('first-seconds')]);
    const late = points.slice(3);
    late.forEach((p, j) => {
      expect(p.offsetMs).toBeGreaterThanOrEqual(600 + j * 1000);
      expect(p.offsetMs).toBeLessThanOrEqual(600 + (j + 1) * 1000);
    });
    points.forEach((p, i) => {
      expect(p.fault).toBe(i % 2 === 0 ? 'power-cut' : 'supervisor-kill');
      expect(p.id).toBe(`${p.fault}@${p.offsetMs}`);
      expect(p.phase).toBe(phaseAt(window, p.offsetMs));
      if (i > 0) expect(p.offsetMs).toBeGreaterThanOrEqual(points[i - 1]!.offsetMs);
    });
    expect(planPoints({ window, faults: ['power-cut', 'supervisor-kill'], count: 8, seed: 42 })).toEqual(points);
    expect(planPoints({ window, faults: ['power-cut', 'supervisor-kill'], count: 8, seed: 43 })).not.toEqual(points);
  });

  it('at 50 points, a sub-second stop of the old release still gets 8 where even spreading gave it 4', () => {
    const sim: UpdateWindow = { phases: [{ phase: 'download', startMs: 0 }, { phase: 'stop-old', startMs: 88 }, { phase: 'start-new', startMs: 509 }, { phase: 'first-seconds', startMs: 912 }], totalMs: 5912 };
    const count = (phase: string) => planPoints({ window: sim, faults: ['power-cut'], count: 50, seed: 1 }).filter((p) => p.phase === phase).length;
    expect(['download', 'stop-old', 'start-new', 'first-seconds'].map(count)).toEqual([6, 8, 8, 28]);
    expect(planPoints({ window: sim, faults: ['power-cut'], count: 1, seed: 1 }).map((p) => p.phase)).toEqual(['first-seconds']);
  });

  it('names the phase a moment falls in', () => {
    expect([0, 99, 100, 450, 600, 9000].map((ms) => phaseAt(window, ms))).toEqual(['download', 'download', 'stop-old', 'start-new', 'first-seconds', 'first-seconds']);
  });

  it('refuses a bad --only, an unknown fault and a count below one, saying what it takes', () => {
    expect(parsePointId('power-cut@1830')).toEqual({ fault: 'power-cut', offsetMs: 1830 });
    expect(() => parsePointId('power-cut:1830')).toThrow(/<fault>@<ms>/);
    expect(() => parsePointId('meteor@10')).toThrow(/<fault>@<ms>/);
    expect(() => parseFaults(['power-cut', 'meteor'])).toThrow(/unknown fault "meteor"; this version injects power-cut, supervisor-kill, engine-restart, network-drop, disk-full/);
    expect(parsePointId('network-drop@250')).toEqual({ fault: 'network-drop', offsetMs: 250 });
    expect(() => planPoints({ window, faults: ['power-cut'], count: 0, seed: 1 })).toThrow(/at least 1/);
  });
});

describe('sweep input, checked before a device starts', () => {
  const base: SweepCommandOptions = { from: FROM, to: TO, target: 'sim', faults: ['power-cut'], points: 3, json: false };
  it.each([
    [{ from: 'test/apps/none.yaml' }, /--from test\/apps\/none.yaml: no such compose file/],
    [{ target: 'moon' }, /--target "moon": known targets are sim, container, qemu, board/],
    [{ faults: ['disk-fill'] }, /unknown fault "disk-fill"/],
    [{ points: 0 }, /--points must be a whole number of at least 1/],
    [{ only: '12' }, /--only takes a point/],
    [{ check: 'no command' }, /--check takes '<service>: <command>'/],
    [{ workers: 0 }, /--workers must be a whole number from 1 to 16, not 0/],
    [{ target: 'board', workers: 2 }, /--workers 2 on the board target needs a lab to lease a board per worker \(FLEETLAB_LAB\)/],
  ])('%j', (change, message) => {
    expect(() => checkSweepInput({ ...base, ...change })).toThrow(message);
  });
});

describe('faults a target cannot inject', () => {
  it('are refused with the capability each needs, from what the target declares', () => {
    expect(() => requireFaults('sim', ['power.cycle', 'supervisor.kill', 'network'], ['power-cut', 'engine-restart', 'network-drop', 'disk-full'])).toThrow(
      'sweep: target sim cannot inject engine-restart (needs engine.restart), network-drop (needs network.registry), disk-full (needs disk.fill); run the sweep on a target that can (qemu or board inject every fault)',
    );
    expect(() => requireFaults('qemu', QEMU_CAPABILITIES, [...FAULTS])).not.toThrow();
  });
});

describe('a sweep on the sim target', () => {
  let driver: TargetDriver;
  const lines: string[] = [];
  beforeAll(async () => {
    driver = await sweepSimTarget('sweep test');
  }, 300_000);
  afterAll(async () => {
    await driver?.dispose?.();
  });

  beforeEach(() => void (lines.length = 0));

  const sweep = async (o: { points?: number; faults?: Fault[]; only?: { fault: Fault; offsetMs: number }; captureDir?: string; workers?: number }) => {
    // As `fleetlab sweep` does: a broken point's timeline beside its capture.
    const devices = Array.from({ length: o.workers ?? 1 }, () => targetDevices(driver, { log: (l) => lines.push(l), ...(o.captureDir ? { timelineDir: o.captureDir } : {}) }));
    try {
      return await runSweep(devices, { from: FROM, to: TO, faults: o.faults ?? ['power-cut'], points: o.points ?? 3, seed: 11, ...(o.only ? { only: o.only } : {}), ...(o.captureDir ? { captureDir: o.captureDir } : {}), progress: (l) => lines.push(l) });
    } finally {
      await Promise.all(devices.map((d) => d.close()));
    }
  };

  it('catches the fragile app: a cut during its migration leaves it in a restart loop, named, and the point breaks again alone', async () => {
    const result = await sweep({ points: 3 });
    const table = sweepTable(result);
    expect(result.window.phases.map((p) => p.phase)).toEqual(['download', 'stop-old', 'start-new', 'first-seconds']);
    // Three points go to the app's first 5 s (the longest phase by far), all inside its 8 s migration.
    const broken = result.points.filter((p) => p.outcome === 'broken');
    expect(broken.length, table).toBeGreaterThan(0);
    // A rerun lands at the same ms after the hand-over, and a loaded machine may start the app
    // later then: the latest broken point, deepest in the migration, has the most room for it.
    const rerun = broken.at(-1)!;
    expect(broken.every((p) => p.broken.some((b) => b.invariant === 'stays-up' || b.invariant === 'reaches-release')), table).toBe(true);
    expect(sweepSummary(result, (id) => `--only ${id}`)).toContain(`broken ${rerun.id}: --only ${rerun.id}`);

    const captureDir = mkdtempSync(join(tmpdir(), 'fleetlab-sweep-capture-'));
    try {
      const again = await sweep({ only: { fault: rerun.fault, offsetMs: rerun.offsetMs }, captureDir });
      expect(again.points.map((p) => [p.id, p.outcome]), sweepTable(again)).toEqual([[rerun.id, 'broken']]);
      // The broken device, captured: its volume still holds the migration's marker, and a replay of it is broken the same way.
      const bundlePath = join(captureDir, `${rerun.id}.tar.gz`);
      expect(again.points[0]!.capture).toEqual({ path: bundlePath });
      expect(sweepSummary(again, (id) => id)).toContain(`its device: ${bundlePath} (fleetlab replay ${bundlePath})`);
      // Its timeline: the point's cut on the power lane, the store's restarts, the failure with the invariant.
      const pagePath = join(captureDir, `${rerun.id}.timeline.html`);
      expect(again.points[0]!.timeline).toEqual({ path: pagePath });
      expect(sweepSummary(again, (id) => id)).toContain(`its timeline: ${pagePath}`);
      const page = readFileSync(pagePath, 'utf8');
      expect(page).toContain(`<h1>sweep point ${rerun.id}</h1>`);
      expect(page).toMatch(/<g class="lane" data-lane="power"[^>]*>.*data-text="cycle/);
      expect(page).toMatch(/data-text="[^"]*store[^"]*: die \(exit [1-9]/);
      expect(page).toMatch(/class="failure-text">failed at \+[\d.]+ s: (stays-up|reaches-release)/);
      const bundle = await readBundle(bundlePath);
      const volume = bundle.names().find((n) => /^volumes\/.*_data\.tar\.gz$/.test(n));
      expect(execFileSync('tar', ['-tz'], { input: bundle.read(volume!) }).toString().split('\n')).toContain('./migrating');
      const { device } = await replayOnSim({ bundle: bundlePath, engine: 'docker', dockerSocket: '/var/run/docker.sock' });
      try {
        const mine = ['--filter', `label=${LABEL.device}=${device.info().uuid}`, '--filter', `label=${LABEL.serviceName}=store`];
        const restarts = () => execFileSync('docker', ['ps', '-a', ...mine, '--format', '{{.ID}}']).toString().trim().split('\n').filter(Boolean)
          .map((id) => Number(execFileSync('docker', ['inspect', '-f', '{{.RestartCount}}', id]).toString().trim()));
        await until('the replayed store restarting', async () => restarts(), (r) => r.some((n) => n > 0), { timeoutMs: 60_000, intervalMs: 500 });
      } finally {
        await device.stop();
      }
    } finally {
      rmSync(captureDir, { recursive: true, force: true });
    }
  }, 300_000);

  it('the same app survives the supervisor killed at any point, on two devices at once: its containers run on, the supervisor is started again', async () => {
    const result = await sweep({ points: 2, faults: ['supervisor-kill'], workers: 2 });
    expect(lines.filter((l) => /^point \d\/2 .*\[worker [12]\]/.test(l)), lines.join('\n')).toHaveLength(2);
    expect(result.points.map((p) => [p.fault, p.outcome]), sweepTable(result)).toEqual([['supervisor-kill', 'passed'], ['supervisor-kill', 'passed']]);
  }, 300_000);

  it('refuses two identical releases before any point runs', async () => {
    const devices = targetDevices(driver, { log: (l) => lines.push(l) });
    const run = runSweep([devices], { from: TO, to: TO, faults: ['power-cut'], points: 5, seed: 1, progress: (l) => lines.push(l) }).finally(() => devices.close());
    await expect(run).rejects.toThrow(/--from and --to are the same release \(commit [0-9a-f]+\): there is no update to sweep/);
    expect(lines.filter((l) => l.startsWith('point '))).toEqual([]);
  }, 300_000);
});
