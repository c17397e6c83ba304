/**
 * The per-user temporary directory (src/user-tmp.ts): made 0700 for this user, the same one
 * when the base already is it (TMPDIR set by `fleetlab test`), and refused with what to do when
 * another user owns the name or it is not a directory.
 */
import { chownSync, chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { userTmpDir, userTmpName } from '../src/user-tmp.js';

const base = mkdtempSync(join(tmpdir(), 'fleetlab-user-tmp-'));
// Shared, as /tmp is: others may enter it.
chmodSync(base, 0o755);
afterAll(() => rmSync(base, { recursive: true, force: true }));
const isRoot = process.getuid?.() === 0;
if (!isRoot) console.log(`user-tmp: the test of a directory another user owns is skipped: it needs root to chown one (uid ${process.getuid?.()})`);

describe('userTmpDir', () => {
  it('makes <base>/fleetlab-<uid> for this user alone, and is that directory again from inside it', () => {
    const dir = userTmpDir(base);
    expect(dir).toBe(join(base, userTmpName()));
    const st = statSync(dir);
    expect([st.uid, st.mode & 0o777]).toEqual([process.getuid!(), 0o700]);
    expect(userTmpDir(dir)).toBe(dir);
  });

  it('is a private directory of this user itself (a test file\'s own TMPDIR), leaving nothing more in it', () => {
    const priv = join(base, 'private');
    mkdirSync(priv, { mode: 0o700 });
    expect(userTmpDir(priv)).toBe(priv);
    expect(readdirSync(priv)).toEqual([]);
  });

  it('tightens a directory of its own that others could read', () => {
    const other = join(base, 'loose');
    mkdirSync(join(other, userTmpName()), { recursive: true });
    chmodSync(join(other, userTmpName()), 0o755);
    expect(statSync(userTmpDir(other)).mode & 0o777).toBe(0o700);
  });

  it('refuses a symlink in its place, naming the path and the way out', () => {
    const planted = join(base, 'planted');
    mkdirSync(planted);
    symlinkSync(base, join(planted, userTmpName()));
    expect(() => userTmpDir(planted)).toThrow(/fleetlab-\d+ should be a directory of yours .*not a directory: remove it \(sudo rm -rf .*\) or set TMPDIR/);
  });

  it.skipIf(!isRoot)('refuses one another user owns (needs root to make it: skipped otherwise)', () => {
    const shared = join(base, 'shared');
    mkdirSync(join(shared, userTmpName()), { recursive: true });
    chownSync(join(shared, userTmpName()), 65534, 65534);
    expect(() => userTmpDir(shared)).toThrow(`${join(shared, userTmpName())} should be a directory of yours (uid 0) for fleetlab's temporary files, but it is owned by uid 65534`);
  });
});
