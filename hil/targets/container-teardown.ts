/**
 * Global teardown for the `container` target. With Ryuk disabled (no registry to pull it
 * from) nothing reaps containers of a run that crashed, so this removes them: device
 * containers carrying this target's label (and testcontainers' `org.testcontainers=true`)
 * whose starting process is gone, the app containers, networks and volumes those devices made
 * on the host's dockerd, and their host data directories. Containers of a run still in
 * progress (owner alive) and other testcontainers users' containers are left alone.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import Docker from 'dockerode';
import { TARGET_LABEL, TARGET_NAME } from './container-docker.js';
import { removeDeviceLeftovers, storedUuid } from '../../sim/device-leftovers.js';
import { alive } from '../../src/processes.js';

/** Removes leftovers of finished or crashed runs; returns how many device containers went. */
export async function removeContainerTargetLeftovers(dockerSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock'): Promise<number> {
  const docker = new Docker({ socketPath: dockerSocket });
  const containers = await docker.listContainers({ all: true, filters: { label: ['org.testcontainers=true', `${TARGET_LABEL.target}=${TARGET_NAME}`] } });
  let removed = 0;
  for (const c of containers) {
    if (alive(Number(c.Labels[TARGET_LABEL.owner]))) continue;
    await docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined);
    const dir = c.Labels[TARGET_LABEL.dir];
    // Only directories this target made (mkdtemp('/tmp/fleetlab-ctr-')), never a path a label could point anywhere.
    if (dir && /^\/tmp\/fleetlab-ctr-[A-Za-z0-9]+$/.test(dir)) {
      const uuid = storedUuid(join(dir, 'device'));
      if (uuid) await removeDeviceLeftovers(docker, uuid).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    }
    removed++;
  }
  return removed;
}

export default async function globalTeardown(): Promise<void> {
  const removed = await removeContainerTargetLeftovers();
  if (removed > 0) console.log(`container target: removed ${removed} leftover device container(s)`);
}
