/**
 * What the timeline watches on a device whose supervisor, engine socket and lock files are on
 * this machine (the sim and container targets): the engine's socket as it is, the
 * supervisor's /proc and the lock root's files read directly, each a few file reads a second.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { ObserveProtocol } from '../../../device-access/protocols.js';
import { hostProcessTree } from './supervisor-usage.js';

/** `<appId>/<service>` of each update lock held under `lockRoot` (`<appId>/<service>/updates.lock`). */
export async function hostHeldLocks(lockRoot: string): Promise<string[]> {
  const held: string[] = [];
  const dirs = (path: string) => readdir(path).catch(() => [] as string[]);
  for (const app of await dirs(lockRoot)) {
    for (const service of await dirs(join(lockRoot, app))) {
      if (await stat(join(lockRoot, app, service, 'updates.lock')).then(() => true, () => false)) held.push(`${app}/${service}`);
    }
  }
  return held;
}

export function hostObserve(device: { engineSocket: string; supervisorPid: () => Promise<number | undefined>; lockRoot: string }): ObserveProtocol {
  const tree = hostProcessTree(device.supervisorPid);
  return {
    engineSocket: async () => device.engineSocket,
    supervisorUsage: () => tree.usage(),
    heldLocks: () => hostHeldLocks(device.lockRoot),
  };
}
