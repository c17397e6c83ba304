/**
 * Global teardown for the `container` target. With Ryuk disabled (no registry to pull it
 * from) nothing reaps containers of a run that crashed, so this removes them: device
 * containers carrying this target's label (and testcontainers' `org.testcontainers=true`)
 * whose starting process is gone, the app containers, networks and volumes those devices made
 * on the host's dockerd, and their host data directories. Containers of a run still in
 * progress (owner alive) and other testcontainers users' containers are left alone.
 */
import { lstatSync } from 'node:fs';
import { basename, dirname, join, normalize } from 'node:path';
import Docker from 'dockerode';
import { CONTAINER_DIR_PREFIX, TARGET_LABEL, TARGET_NAME } from '../lib/target-labels.js';
import { removeTree } from './engine-files.js';
import { removeDeviceLeftovers, storedUuid } from '../../sim/device-leftovers.js';
import { alive } from '../../src/processes.js';
import { USER_TMP_NAME } from '../../src/user-tmp.js';

/**
 * Only directories this target made, never a path a label could point anywhere: mkdtemp's name
 * in a user's temporary directory (`<tmpdir>/fleetlab-<uid>/`, or a TMPDIR private to this
 * user, which src/user-tmp.ts uses as it is), or in /tmp as before there was one.
 */
export function madeByTarget(dir: string): boolean {
  if (normalize(dir) !== dir || !new RegExp(`^${CONTAINER_DIR_PREFIX}[A-Za-z0-9]{6}$`).test(basename(dir))) return false;
  const parent = dirname(dir);
  if (parent === '/tmp' || USER_TMP_NAME.test(basename(parent))) return true;
  const st = lstatSync(parent, { throwIfNoEntry: false });
  return Boolean(st?.isDirectory() && st.uid === process.getuid?.() && (st.mode & 0o077) === 0);
}

/** Removes leftovers of finished or crashed runs; returns how many device containers went. */
export async function removeContainerTargetLeftovers(dockerSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock'): Promise<number> {
  const docker = new Docker({ socketPath: dockerSocket });
  const containers = await docker.listContainers({ all: true, filters: { label: ['org.testcontainers=true', `${TARGET_LABEL.target}=${TARGET_NAME}`] } });
  let removed = 0;
  for (const c of containers) {
    if (alive(Number(c.Labels[TARGET_LABEL.owner]))) continue;
    await docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined);
    const dir = c.Labels[TARGET_LABEL.dir];
    if (dir && madeByTarget(dir)) {
      const uuid = storedUuid(join(dir, 'device'));
      if (uuid) await removeDeviceLeftovers(docker, uuid).catch(() => undefined);
      // Root's files from the device container, perhaps in another user's directory: through the engine.
      await removeTree(dir, dockerSocket).catch(() => undefined);
    }
    removed++;
  }
  return removed;
}

export default async function globalTeardown(): Promise<void> {
  const removed = await removeContainerTargetLeftovers();
  if (removed > 0) console.log(`container target: removed ${removed} leftover device container(s)`);
}
