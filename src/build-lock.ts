/**
 * One build of a kind at a time on this machine for this user (HIL workers starting together,
 * a bench, the CLI): the second waits, then finds the first one's result in the cache. A lock
 * whose holder died is taken over. Two users' builds may overlap: they write the same cache.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FleetlabError } from './errors.js';
import { alive as pidAlive } from './processes.js';
import { userTmpDir } from './user-tmp.js';
import { until } from './wait.js';


/**
 * Under the machine's /tmp rather than TMPDIR: a test run gives each test file a TMPDIR of its
 * own (hil/lib/run-leftovers.ts), and builds started from two of them, or from two runs, still
 * share one engine and one cache.
 */
const LOCK_ROOT = '/tmp';

export async function withBuildLock<T>(name: string, report: (stage: string, detail: string) => void, fn: () => Promise<T>, waitMs = 15 * 60_000): Promise<T> {
  // In this user's own directory of the machine's /tmp: a lock root's killed run left in /tmp
  // itself could not be taken over by a CI runner's user.
  const dir = join(userTmpDir(LOCK_ROOT), `${name}.lock`);
  let holder = NaN;
  let told = false;
  const take = async (): Promise<boolean> => {
    for (;;) {
      try {
        mkdirSync(dir);
        writeFileSync(join(dir, 'pid'), String(process.pid));
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      holder = NaN;
      try {
        holder = Number(readFileSync(join(dir, 'pid'), 'utf8'));
      } catch {
        // being created or removed right now
      }
      // A dead holder's lock is taken over at once, without waiting a round.
      if (!(Number.isInteger(holder) && holder > 0 && !pidAlive(holder))) break;
      rmSync(dir, { recursive: true, force: true });
    }
    if (!told) report('wait', `another build (pid ${holder}) is running; waiting for it`);
    told = true;
    return false;
  };
  await until(`the build lock ${dir}`, take, (taken) => taken, {
    timeoutMs: waitMs,
    intervalMs: 500,
    // A lock directory that cannot be made (not EEXIST) is an error waiting does not cure.
    stopOn: () => true,
    fail: (f) => (f.end === 'timeout' ? new FleetlabError('SUP_ERR_INTERNAL', `another build (pid ${holder}) has held ${dir} for ${waitMs / 60_000} min`) : undefined),
  });
  try {
    return await fn();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
