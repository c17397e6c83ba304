/**
 * The temporary directory of this user: `<tmpdir>/fleetlab-<uid>`, mode 0700. A fixed name in
 * the shared /tmp (a lock, testcontainers' lock file) is owned by whichever user made it first,
 * so a CI runner's user meets root's files from an earlier run there and cannot take or remove
 * them; in a directory of its own it never does.
 */
import { chmodSync, lstatSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { FleetlabError } from './errors.js';

/** Such a directory's name, of any user. */
export const USER_TMP_NAME = /^fleetlab-\d+$/;

/** The directory's name for this user; `fleetlab test` hands it to Playwright as TMPDIR. */
export function userTmpName(uid = process.getuid?.() ?? 0): string {
  return `fleetlab-${uid}`;
}

/**
 * Creates it when missing; refuses one another user owns (made by that user, or planted), as
 * what goes in it (locks, a device's data) must be this user's alone. A base that is already
 * private to this user (TMPDIR set by `fleetlab test`, or a test file's own TMPDIR, 0700 and
 * this user's) is that directory, not one more level that nobody would remove.
 */
export function userTmpDir(base = tmpdir()): string {
  const uid = process.getuid?.() ?? 0;
  const own = lstatSync(base, { throwIfNoEntry: false });
  if (own?.isDirectory() && own.uid === uid && (own.mode & 0o077) === 0) return base;
  const dir = basename(base) === userTmpName(uid) ? base : join(base, userTmpName(uid));
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  if (!st.isDirectory() || st.uid !== uid) {
    throw new FleetlabError(
      'HIL_ERR_PERMISSION',
      `${dir} should be a directory of yours (uid ${uid}) for fleetlab's temporary files, but it is ${st.isDirectory() ? `owned by uid ${st.uid}` : 'not a directory'}: remove it (sudo rm -rf ${dir}) or set TMPDIR to a directory of your own`,
    );
  }
  if ((st.mode & 0o077) !== 0) chmodSync(dir, 0o700);
  return dir;
}
