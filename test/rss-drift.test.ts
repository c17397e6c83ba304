/**
 * The supervisor bench's long-run drift: RSS around 100,000 calls against where it settles,
 * from means over a span, so that a saw-tooth's phase does not decide the figure.
 */
import { describe, expect, it } from 'vitest';
import { rssDrift } from '../bench/rss-drift.js';

// RSS (MiB) every 10,000 calls from one 200,000-call run of `npm run bench` on Node 24.
const SAW = [93.2, 94.7, 94.4, 95.8, 96.6, 98, 93.7, 94.8, 96.2, 96.8, 91.5, 92.6, 94, 95.3, 92.2, 93.3, 94.7, 95.3, 91.4, 92.6];
const checkpoints = SAW.map((rssMiB, i) => ({ calls: (i + 1) * 10_000, rssMiB }));

describe('rssDrift', () => {
  it('compares the means of the checkpoints in the span up to each point, and says what the two samples alone give', () => {
    const r = rssDrift(checkpoints, 100_000, 50_000);
    // 60k..100k: 95.9 MiB; 160k..200k: 93.46 MiB.
    expect(r.drift).toBeCloseTo((98 + 93.7 + 94.8 + 96.2 + 96.8) / (93.3 + 94.7 + 95.3 + 91.4 + 92.6) - 1, 6);
    expect(r.drift).toBeCloseTo(0.0261, 3);
    expect(r.single).toBeCloseTo(96.8 / 92.6 - 1, 6);
    expect(r).toMatchObject({ comparedAt: 100_000, lastCalls: 200_000 });
  });

  it('takes the first checkpoint at or past the point, and a span shorter than the run', () => {
    const r = rssDrift(checkpoints.slice(0, 4), 15_000, 20_000);
    expect(r.comparedAt).toBe(20_000);
    expect(r.drift).toBeCloseTo((93.2 + 94.7) / (94.4 + 95.8) - 1, 6);
  });

  it('refuses a run with no checkpoints', () => {
    expect(() => rssDrift([], 100_000, 50_000)).toThrow('no checkpoints');
  });
});
