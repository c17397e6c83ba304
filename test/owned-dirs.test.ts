/**
 * What the next run reaps of `<prefix>*` directories: only those whose recorded owner is gone.
 * A directory without an owner file is not provably a run's (a test's working directory named
 * with the same prefix, another tool's), so it is left alone, as is one whose owner still runs.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ownerRecord, reapStale, spawnOwned, writeOwner } from '../src/owned-dirs.js';

const root = mkdtempSync(join(tmpdir(), 'fleetlab-owned-dirs-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('reapStale', () => {
  it('removes a directory whose owner is gone, and leaves one whose owner runs and one with no owner file', async () => {
    const dead = join(root, 'fleetlab-fleet-dead');
    const alive = join(root, 'fleetlab-fleet-alive');
    const foreign = join(root, 'fleetlab-fleet-test-abc');
    for (const d of [dead, alive, foreign]) mkdirSync(d);
    // pid 2^22 + 1 is above Linux's pid_max: that owner cannot be running.
    writeOwner(dead, { owner: 4_194_305 });
    writeOwner(alive, ownerRecord());
    mkdirSync(join(foreign, 'cloud'));

    expect(await reapStale(root, 'fleetlab-fleet-')).toEqual([dead]);
    expect([existsSync(dead), existsSync(alive), existsSync(join(foreign, 'cloud'))]).toEqual([false, true, true]);
  });
});

describe('spawnOwned', () => {
  it("gives the program a temp dir inside its directory, so what it leaves there goes with the directory", async () => {
    const dir = join(root, 'fleetlab-spawn-tmp');
    mkdirSync(dir);
    const { exited } = spawnOwned(dir, 'sh', ['-c', 'echo "$TMPDIR"; mktemp'], join(dir, 'out.log'));
    await exited;
    const [tmp, made] = readFileSync(join(dir, 'out.log'), 'utf8').trim().split('\n');
    expect(tmp).toBe(join(dir, 'tmp'));
    expect(made?.startsWith(`${join(dir, 'tmp')}/`)).toBe(true);
  });
});
