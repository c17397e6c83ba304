/**
 * What a device leaves in its engine after its supervisor has stopped: the containers,
 * networks and volumes the supervisor created, all labelled with the device's uuid. Found by
 * that label only, so a shared dockerd's other objects are never touched.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { FleetlabError, errorText } from '../src/errors.js';
import { LABEL } from '../src/protocol/engine-labels.js';

/** uuid of the device whose data dir is `dataDir`, from the supervisor's store, if it got that far. */
export function storedUuid(dataDir: string): string | undefined {
  try {
    return (JSON.parse(readFileSync(join(dataDir, 'supervisor', 'device.json'), 'utf8')) as { uuid?: string }).uuid;
  } catch {
    return undefined;
  }
}

/** Whether an engine error says the object is already gone (removed meanwhile). */
const gone = (err: unknown) => (err as { statusCode?: number }).statusCode === 404;

/**
 * Removes the device's containers, networks and (unless `keepVolumes`) volumes, in that order
 * (a network or volume in use by a container cannot go first); throws one error naming what
 * stayed.
 */
export async function removeDeviceLeftovers(docker: Docker, uuid: string, options: { keepVolumes?: boolean } = {}): Promise<void> {
  const filters = { label: [`${LABEL.device}=${uuid}`] };
  const failures: string[] = [];
  const remove = async (what: string, action: () => Promise<unknown>) => {
    await action().catch((err: unknown) => {
      if (!gone(err)) failures.push(`${what}: ${errorText(err)}`);
    });
  };
  for (const c of await docker.listContainers({ all: true, filters })) await remove(`container ${c.Names[0] ?? c.Id}`, () => docker.getContainer(c.Id).remove({ force: true, v: true }));
  for (const n of await docker.listNetworks({ filters })) await remove(`network ${n.Name}`, () => docker.getNetwork(n.Id).remove());
  // Images stood in for a replayed device (fleetlab replay) carry its label; no other image does.
  for (const i of await docker.listImages({ filters })) await remove(`image ${i.RepoTags?.[0] ?? i.Id}`, () => docker.getImage(i.Id).remove({ force: true }));
  const { Volumes } = options.keepVolumes ? { Volumes: [] } : await docker.listVolumes({ filters });
  for (const v of Volumes ?? []) await remove(`volume ${v.Name}`, () => docker.getVolume(v.Name).remove());
  if (failures.length > 0) throw new FleetlabError('SUP_ERR_ENGINE', `device ${uuid} left ${failures.join('; ')}`);
}
