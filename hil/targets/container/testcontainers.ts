/** What the container target needs of testcontainers and the engine before its first device starts. */
import { accessSync, constants, lstatSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { FleetlabError } from '../../../src/errors.js';

/** testcontainers reads these when it first talks to the engine: offline, no Ryuk. */
export function offlineTestcontainers(): void {
  process.env.TESTCONTAINERS_RYUK_DISABLED ??= 'true';
  process.env.TESTCONTAINERS_HOST_OVERRIDE ??= 'localhost';
}

function canWrite(path: string): boolean {
  try {
    accessSync(path, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * testcontainers takes a file lock before its first container (common/file-lock.js: proper-lockfile
 * on `<tmpdir>/testcontainers-node.lock`), a fixed name: one that an earlier run as another user
 * (root) left in a shared /tmp cannot be written, and its stale `.lock` directory cannot be taken
 * over, so the run would fail or wait forever. Its only setting for the place is TMPDIR, which
 * `fleetlab test` points at the user's own directory; started any other way, this says so first.
 */
export function requireTestcontainersLock(): void {
  const dir = realpathSync(tmpdir());
  const uid = process.getuid?.() ?? 0;
  for (const name of ['testcontainers-node.lock', 'testcontainers-node.lock.lock']) {
    const path = join(dir, name);
    let st;
    try {
      st = lstatSync(path);
    } catch {
      continue;
    }
    // proper-lockfile refreshes a held lock's mtime every 5 s: an older one of another user is left over.
    const stuck = name.endsWith('.lock.lock') ? st.uid !== uid && Date.now() - st.mtimeMs > 10_000 : !canWrite(path);
    if (stuck) {
      throw new FleetlabError(
        'HIL_ERR_PERMISSION',
        `testcontainers' lock ${path} belongs to uid ${st.uid}, left by an earlier run as that user, and uid ${uid} cannot take it: run through npx fleetlab test (it gives each user a temporary directory of its own), set TMPDIR to a directory of yours, or remove it (sudo rm -rf ${join(dir, 'testcontainers-node.lock')}*)`,
      );
    }
  }
}

/** Whether the engine confines containers with AppArmor (docker-default denies mount). */
export async function usesAppArmor(docker: Docker): Promise<boolean> {
  const info = (await docker.info()) as { SecurityOptions?: string[] };
  return (info.SecurityOptions ?? []).some((o) => o.includes('apparmor'));
}
