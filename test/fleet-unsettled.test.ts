/**
 * Why a fleet has not settled, grouped over every device and merged across processes
 * (sim/fleet/unsettled.ts), and the health of a process that runs devices
 * (sim/fleet/process-health.ts), as the fleet bench and `fleetlab sim fleet` print them.
 */
import { describe, expect, it } from 'vitest';
import type { StuckDevice } from '../sim/fleet/unsettled.js';
import { describeHealth, HealthWatch } from '../sim/fleet/process-health.js';
import { describeUnsettled, groupUnsettled, mergeUnsettled } from '../sim/fleet/unsettled.js';

const device = (index: number, phase: StuckDevice['phase'], reason: string): StuckDevice => ({ index, uuid: `u${index}`, phase, releaseId: 1, faults: [], reason });

describe('unsettled devices, grouped', () => {
  it('counts devices by phase and reason with the numbers folded, most first, with the first device as the example', () => {
    const groups = groupUnsettled(
      [device(3, 'applying', 'downloading 2 images'), device(4, 'offline', 'no tunnel to the cloud (tunnel: closed (code 1006))'), device(5, 'applying', 'downloading 1 images'), device(9, 'applying', 'downloading 12 images')],
      '1/2',
    );
    expect(groups.map((g) => [g.key, g.count, g.example.index, g.where])).toEqual([
      ['applying: downloading N images', 3, 3, { '1/2': 3 }],
      ['offline: no tunnel to the cloud (tunnel: closed (code N))', 1, 4, { '1/2': 1 }],
    ]);
  });

  it("merges the groups of several processes: counts summed, per process kept, the first process's example", () => {
    const a = groupUnsettled([device(0, 'offline', 'no tunnel to the cloud'), device(1, 'offline', 'no tunnel to the cloud')], '1/2');
    const b = groupUnsettled([device(5, 'offline', 'no tunnel to the cloud'), device(6, 'applying', 'stopping main'), device(7, 'applying', 'stopping main'), device(8, 'applying', 'stopping main')], '2/2');
    const merged = mergeUnsettled([a, b]);
    expect(merged.map((g) => [g.key, g.count, g.example.index, g.where])).toEqual([
      ['applying: stopping main', 3, 6, { '2/2': 3 }],
      ['offline: no tunnel to the cloud', 3, 0, { '1/2': 2, '2/2': 1 }],
    ]);
    // The inputs are left as they were.
    expect(a[0]!.where).toEqual({ '1/2': 2 });
  });

  it('describes the largest groups and counts the rest', () => {
    const groups = groupUnsettled([device(0, 'offline', 'a'), device(1, 'offline', 'a'), device(2, 'failed', 'b'), device(3, 'applying', 'c')], '1/1');
    expect(describeUnsettled(groups, 2)).toEqual(['  2× offline (2 in process 1/1; e.g. device 0): a', '  1× applying (1 in process 1/1; e.g. device 3): c', '  1 more in 1 other groups']);
    expect(describeUnsettled([], 2)).toEqual([]);
  });
});

describe('the health of a process that runs devices', () => {
  it('sees the event loop held up and the CPU it took, since the sample before', async () => {
    const watch = new HealthWatch('1/1');
    try {
      // The loop's timer has ticked before (its first tick has no tick before it to measure from).
      await new Promise((r) => setTimeout(r, 100));
      watch.sample();
      // Held up until this process has used 600 ms of CPU (bounded by wall time on a loaded machine).
      const cpu0 = process.cpuUsage();
      const t0 = Date.now();
      while ((process.cpuUsage(cpu0).user + process.cpuUsage(cpu0).system) / 1000 < 600 && Date.now() - t0 < 20_000);
      await new Promise((r) => setTimeout(r, 100));
      const h = watch.sample();
      expect(h).toMatchObject({ label: '1/1', pid: process.pid });
      expect(h.loopDelayMaxMs).toBeGreaterThanOrEqual(500);
      expect(h.loopDelayP99Ms).toBeGreaterThanOrEqual(500);
      // The CPU taken in the sample's time, in percent of one core: at least the 600 ms held.
      expect((h.cpuPercent / 100) * h.sinceMs).toBeGreaterThanOrEqual(590);
      expect(describeHealth([h])).toMatch(/^1\/1 cpu \d+% loop p99 \d+(\.\d)?( s| ms) \(max \d+(\.\d)?( s| ms)\)$/);
      // The next sample starts afresh.
      await new Promise((r) => setTimeout(r, 50));
      expect(watch.sample().loopDelayMaxMs).toBeLessThan(h.loopDelayMaxMs);
    } finally {
      watch.close();
    }
  });
});
