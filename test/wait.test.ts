/**
 * The wait primitive (src/wait.ts): small deadlines are fine here, it tests how a wait ends,
 * not how fast anything is.
 */
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { sleep, until, withDeadline } from '../src/wait.js';

describe('until', () => {
  it('resolves the first value done accepts, probing again until then', async () => {
    let n = 0;
    const value = await until('n reaches 3', async () => ++n, (v) => v >= 3, { timeoutMs: 5_000, intervalMs: 1 });
    expect(value).toBe(3);
    expect(n).toBe(3);
  });

  it('retries a probe that throws and gives the value once it answers', async () => {
    let n = 0;
    const value = await until('a flaky probe', async () => {
      if (++n < 3) throw new Error('not yet');
      return 'up';
    }, (v) => v === 'up', { timeoutMs: 5_000, intervalMs: 1 });
    expect(value).toBe('up');
  });

  it('times out with one FleetlabError naming what was awaited and the last value seen', async () => {
    const err = await until('the answer', async () => 41, (v) => v === 42, { timeoutMs: 30, intervalMs: 5 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FleetlabError);
    expect((err as FleetlabError).code).toBe('SUP_ERR_TIMEOUT');
    expect((err as Error).message).toBe('the answer: not reached within 30 ms; last seen 41');
  });

  it('names the last error when the probe never answered, and keeps it as the cause', async () => {
    const boom = new Error('ECONNREFUSED');
    const err = (await until('the API', () => Promise.reject(boom), () => true, { timeoutMs: 20, intervalMs: 5 }).catch((e: unknown) => e)) as FleetlabError;
    expect(err.message).toBe('the API: not reached within 20 ms; last seen "error: ECONNREFUSED"');
    expect(err.cause).toBe(boom);
  });

  it('probes once even with no time left', async () => {
    expect(await until('there already', async () => 1, (v) => v === 1, { timeoutMs: 0, intervalMs: 5 })).toBe(1);
    const err = (await until('not there', async () => 2, (v) => v === 1, { timeoutMs: 0, intervalMs: 5 }).catch((e: unknown) => e)) as Error;
    expect(err.message).toBe('not there: not reached within 0 ms; last seen 2');
  });

  it('says nothing was read when it ended before any probe finished', async () => {
    const err = (await until('nothing', async () => 1, () => false, { timeoutMs: 1000, intervalMs: 5, alive: () => false }).catch((e: unknown) => e)) as Error;
    expect(err.message).toBe('nothing: given up, it is gone; last seen "(nothing read)"');
  });

  it('ends at once when alive() says why the awaited thing is gone', async () => {
    let probes = 0;
    const err = (await until('the child', async () => ++probes, () => false, { timeoutMs: 60_000, intervalMs: 1, alive: () => probes < 2 || 'it exited with 1' }).catch((e: unknown) => e)) as FleetlabError;
    expect(err.code).toBe('SUP_ERR_TIMEOUT');
    expect(err.message).toBe('the child: given up, it exited with 1; last seen 2');
    expect(probes).toBe(2);
  });

  it('rethrows a probe error stopOn accepts without waiting further', async () => {
    const fatal = new Error('permission denied');
    let probes = 0;
    const err = await until('ssh', () => (probes++, Promise.reject(fatal)), () => true, { timeoutMs: 60_000, intervalMs: 1, stopOn: (e) => e === fatal }).catch((e: unknown) => e);
    expect(err).toBe(fatal);
    expect(probes).toBe(1);
  });

  it('throws what fail() makes instead, told how the wait ended and what was seen last', async () => {
    const err = (await until('x', async () => 'down', () => false, {
      timeoutMs: 10,
      intervalMs: 2,
      fail: (f) => new Error(`${f.end} after ${f.timeoutMs} ms: ${f.last && 'value' in f.last ? f.last.value : '?'}`),
    }).catch((e: unknown) => e)) as Error;
    expect(err.message).toBe('timeout after 10 ms: down');
  });

  it('gives the probe the milliseconds left', async () => {
    const seen: number[] = [];
    await until('x', async (left) => (seen.push(left), seen.length), (n) => n === 2, { timeoutMs: 5_000, intervalMs: 1 });
    expect(seen[0]).toBeGreaterThan(4_000);
    expect(seen[0]).toBeLessThanOrEqual(5_000);
  });

  it('ends with the signal\'s reason when aborted, also in the middle of a pause', async () => {
    const abort = new AbortController();
    const reason = new Error('stopped by the user');
    setTimeout(() => abort.abort(reason), 20);
    const t0 = Date.now();
    const err = await until('x', async () => 0, () => false, { timeoutMs: 60_000, intervalMs: 30_000, signal: abort.signal }).catch((e: unknown) => e);
    expect(err).toBe(reason);
    expect(Date.now() - t0).toBeLessThan(10_000);
  });
});

describe('sleep', () => {
  it('resolves after the time', async () => {
    const t0 = Date.now();
    await sleep(20);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(15);
  });

  it('rejects with the reason when the signal aborts, at once if it already has', async () => {
    const abort = new AbortController();
    const pending = sleep(60_000, abort.signal);
    abort.abort(new Error('enough'));
    await expect(pending).rejects.toThrow('enough');
    await expect(sleep(60_000, abort.signal)).rejects.toThrow('enough');
  });
});

describe('withDeadline', () => {
  const root = fileURLToPath(new URL('..', import.meta.url));
  /** A one-shot program whose only pending work is a promise nothing settles (as undici can leave a fetch). */
  const oneShot = (bounded: string) => execa(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', `import { withDeadline } from './src/wait.ts';\ntry { await ${bounded}; console.log('settled'); } catch (err) { console.log(err.name); process.exitCode = 1; }`], { cwd: root, reject: false });

  it('ends a promise that ignores its signal at the deadline, and keeps a one-shot program alive until then', async () => {
    const r = await oneShot('withDeadline(300, () => new Promise(() => {}))');
    expect([r.exitCode, r.stdout.trim()], r.stderr).toEqual([1, 'TimeoutError']);
    // What it replaces: AbortSignal.timeout's timer does not hold the process, which ends with exit 13 and says nothing.
    const unbounded = await oneShot('new Promise((_, reject) => AbortSignal.timeout(300).addEventListener("abort", () => reject(new Error("aborted"))))');
    expect([unbounded.exitCode, unbounded.stdout.trim()]).toEqual([13, '']);
  });

  it("gives fn's result, and aborts its signal with a TimeoutError at the deadline", async () => {
    expect(await withDeadline(1000, async (signal) => (signal.aborted ? 'aborted' : 'done'))).toBe('done');
    let seen: AbortSignal | undefined;
    const err = await withDeadline(20, (signal) => {
      seen = signal;
      return new Promise(() => undefined);
    }).catch((e: unknown) => e);
    expect((err as Error).name).toBe('TimeoutError');
    expect(seen?.aborted).toBe(true);
  });
});
