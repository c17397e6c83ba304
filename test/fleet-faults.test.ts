/**
 * Which devices of a fleet get which fault, and which devices a shard runs: seeded, exact in
 * count, and the same whether the fleet runs in one process or in shards.
 */
import { describe, expect, it } from 'vitest';
import { assignFaults, clockSkewOf, MAX_SKEW_MS, MIN_SKEW_MS, parseFault, shardRange } from '../sim/fleet/fault-plan.js';

describe('parseFault', () => {
  it('reads kind:percent%', () => {
    expect(parseFault('partition:10%')).toEqual({ kind: 'partition', percent: 10 });
    expect(parseFault(' disk-full:0.5% ')).toEqual({ kind: 'disk-full', percent: 0.5 });
    expect(parseFault('pull-fails:100%')).toEqual({ kind: 'pull-fails', percent: 100 });
    expect(parseFault('clock-skew:5%')).toEqual({ kind: 'clock-skew', percent: 5 });
  });

  it('says what to fix', () => {
    expect(() => parseFault('partition')).toThrow('--fault "partition": write it as <kind>:<percent>%, e.g. partition:10%; kinds: partition, disk-full, pull-fails, clock-skew');
    expect(() => parseFault('flood:10%')).toThrow('unknown kind "flood"');
    expect(() => parseFault('partition:0%')).toThrow('the share must be above 0% and at most 100%');
    expect(() => parseFault('partition:150%')).toThrow('the share must be above 0% and at most 100%');
  });
});

describe('assignFaults', () => {
  it('draws round(N x percent) devices per fault, the same ones for the same seed', () => {
    const specs = [parseFault('partition:10%'), parseFault('pull-fails:2%')];
    const a = assignFaults(10_000, specs, 7);
    const count = (m: Map<number, string[]>, kind: string) => [...m.values()].filter((k) => k.includes(kind)).length;
    expect(count(a, 'partition')).toBe(1000);
    expect(count(a, 'pull-fails')).toBe(200);
    expect([...a.keys()].every((i) => i >= 0 && i < 10_000)).toBe(true);
    expect(assignFaults(10_000, specs, 7)).toEqual(a);
    const other = assignFaults(10_000, specs, 8);
    expect([...other.keys()].sort()).not.toEqual([...a.keys()].sort());
  });

  it('draws each fault on its own: adding one does not move another', () => {
    const alone = assignFaults(500, [parseFault('partition:10%')], 3);
    const both = assignFaults(500, [parseFault('partition:10%'), parseFault('disk-full:5%')], 3);
    const partitioned = (m: Map<number, string[]>) => [...m].filter(([, k]) => k.includes('partition')).map(([i]) => i).sort((x, y) => x - y);
    expect(partitioned(both)).toEqual(partitioned(alone));
  });
});

describe('clockSkewOf', () => {
  it('sets each skewed clock an hour to thirty days off, ahead or behind, the same for the same seed and index', () => {
    const skews = Array.from({ length: 1000 }, (_, i) => clockSkewOf(i, 7));
    expect(skews.every((s) => Math.abs(s) >= MIN_SKEW_MS && Math.abs(s) <= MAX_SKEW_MS && s % 1000 === 0)).toBe(true);
    const ahead = skews.filter((s) => s > 0).length;
    expect(ahead).toBeGreaterThan(400);
    expect(ahead).toBeLessThan(600);
    expect(new Set(skews).size).toBeGreaterThan(990);
    expect(Array.from({ length: 1000 }, (_, i) => clockSkewOf(i, 7))).toEqual(skews);
    expect(clockSkewOf(3, 8)).not.toBe(clockSkewOf(3, 7));
  });
});

describe('shardRange', () => {
  it('splits the indices so the shards cover the fleet once', () => {
    const covered: number[] = [];
    for (let i = 1; i <= 3; i++) {
      const r = shardRange(10, `${i}/3`);
      expect(r.label).toBe(`${i}/3`);
      for (let j = r.from; j < r.to; j++) covered.push(j);
    }
    expect(covered).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(shardRange(10, undefined)).toEqual({ from: 0, to: 10, label: '1/1' });
  });

  it('refuses what is not i/n', () => {
    for (const bad of ['0/2', '3/2', '1-2', '1/0', 'a/b']) expect(() => shardRange(10, bad)).toThrow('write it as i/n with 1 <= i <= n');
    expect(() => shardRange(1, '1/2')).toThrow('--shard 1/2 of 1 devices holds none: split a fleet into at most 1 shards');
  });
});
