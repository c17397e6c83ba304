/**
 * A simulated device whose owner was killed with -9 (a sweep, a replay, a test run) is reaped
 * by the next start: the processes that carry its session label stopped, its containers
 * removed by the uuid in its store, its directory gone. One whose owner runs is left alone.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterEach, expect, it } from 'vitest';
import { reapAbandonedDevices } from '../sim/device.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { isRunning, SESSION_VARIABLE } from '../src/processes.js';
import { ownerRecord, writeOwner } from '../src/owned-dirs.js';

const socketPath = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
const docker = new Docker({ socketPath });
const made: string[] = [];
afterEach(async () => {
  for (const id of made.splice(0)) await docker.getContainer(id).remove({ force: true }).catch(() => undefined);
});

/** A device directory as SimDevice.start leaves it, owned by `owner`, with a labelled process and a container. */
async function deviceDir(owner: number): Promise<{ dir: string; pid: number; container: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'fleetlab-sim-'));
  const uuid = `reap${Math.random().toString(16).slice(2, 10)}`;
  const session = `sim-test-${uuid}`;
  mkdirSync(join(dir, 'supervisor'));
  writeFileSync(join(dir, 'supervisor', 'device.json'), JSON.stringify({ uuid }));
  writeFileSync(join(dir, 'engine.json'), JSON.stringify({ dockerSocket: socketPath }));
  writeOwner(dir, { ...ownerRecord({ session }), owner });
  const child = spawn('sleep', ['60'], { env: { ...process.env, [SESSION_VARIABLE]: session }, detached: true, stdio: 'ignore' });
  child.unref();
  const c = await docker.createContainer({ Image: 'fleetlab/test-app:1', Labels: { [LABEL.device]: uuid } });
  made.push(c.id);
  return { dir, pid: child.pid!, container: c.id };
}

it('reaps a device whose owner is gone, and leaves one whose owner runs', async () => {
  const gone = spawnSync('true').pid;
  const abandoned = await deviceDir(gone);
  const live = await deviceDir(process.pid);
  try {
    const reaped = await reapAbandonedDevices();
    expect(reaped).toContain(abandoned.dir);
    expect(reaped).not.toContain(live.dir);
    expect(existsSync(abandoned.dir)).toBe(false);
    expect(isRunning(abandoned.pid)).toBe(false);
    await expect(docker.getContainer(abandoned.container).inspect()).rejects.toMatchObject({ statusCode: 404 });
    expect(existsSync(live.dir)).toBe(true);
    expect(isRunning(live.pid)).toBe(true);
    expect((await docker.getContainer(live.container).inspect()).Id).toBe(live.container);
  } finally {
    process.kill(live.pid, 'SIGKILL');
    spawnSync('rm', ['-rf', live.dir]);
  }
});
