/**
 * Issue 39 item 4: the harness as a CI runner's user (in the docker group, not root). dockerd's
 * volume directory is root's alone, so the sim target's `files` on a volume go through the
 * engine (hil/targets/engine-files.ts); a tree a root container left in the user's directory is
 * removed the same way; testcontainers' lock file that root left in a shared temporary
 * directory is said, not waited on. Run by a real temporary user against the real dockerd; the packed
 * package's whole `fleetlab test` as such a user is in test/package/ci-runner.test.ts.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cannotMakeUsers, makeDockerUser, type TempUser } from './helpers/temp-user.js';

const SOCKET = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
const root = fileURLToPath(new URL('..', import.meta.url));
const child = fileURLToPath(new URL('./helpers/non-root-files-child.ts', import.meta.url));
const why = cannotMakeUsers();
if (why) console.log(`non-root files: skipped: ${why}`);

describe.skipIf(why !== undefined)('files as a user in the docker group', () => {
  const docker = new Docker({ socketPath: SOCKET });
  const volume = `fleetlab-nonroot-${process.pid}`;
  let user: TempUser;

  beforeAll(async () => {
    await docker.createVolume({ Name: volume, Labels: { 'io.fleetlab.test': 'non-root-files' } });
    user = makeDockerUser('fltest');
  });

  afterAll(async () => {
    user?.remove();
    await docker.getVolume(volume).remove().catch(() => undefined);
  });

  it('reads, writes, lists and removes in a volume it cannot enter, and removes root\'s files from its own directory', async () => {
    const res = await user.run(process.execPath, ['--import', 'tsx', child, SOCKET, volume], root, { timeoutMs: 120_000 });
    expect(res.code, res.out).toBe(0);
    const seen = JSON.parse(res.out.trim().split('\n').at(-1)!) as Record<string, unknown>;
    expect(seen).toEqual({
      uid: user.uid,
      plainRead: 'EACCES',
      read: 'v1\n',
      list: ['.hidden', 'app', 'two\nlines'],
      existsBefore: true,
      existsAfter: false,
      missing: expect.stringMatching(/^read \S+\/none on the device \(through the engine: the volume directory is root's\): cat: .*No such file/),
      own: 'direct',
      rootWrote: 0,
      plainRemove: 'EACCES',
      removed: true,
    });
    // The helper containers are gone with their commands.
    expect(await docker.listContainers({ all: true, filters: { label: ['io.fleetlab.hil.helper'] } })).toEqual([]);
  }, 180_000);

  it('container target: testcontainers\' lock that a run as root left in a shared temporary directory is one sentence, not a wait', async () => {
    // A shared temporary directory as /tmp is (sticky, everyone's), with root's lock file in it.
    const shared = mkdtempSync(join(tmpdir(), 'fleetlab-shared-tmp-'));
    try {
      chmodSync(shared, 0o1777);
      writeFileSync(join(shared, 'testcontainers-node.lock'), '');
      const start = `import('./hil/targets/container.ts').then((m) => m.containerTarget.start()).then(() => console.log('started'), (e) => console.log(e.code + ': ' + e.message))`;
      const res = await user.run(process.execPath, ['--import', 'tsx', '-e', start], root, { timeoutMs: 60_000, env: { TMPDIR: shared } });
      expect(res.code, res.out).toBe(0);
      expect(res.out.trim()).toBe(
        `HIL_ERR_PERMISSION: testcontainers' lock ${join(shared, 'testcontainers-node.lock')} belongs to uid 0, left by an earlier run as that user, and uid ${user.uid} cannot take it: run through npx fleetlab test (it gives each user a temporary directory of its own), set TMPDIR to a directory of yours, or remove it (sudo rm -rf ${join(shared, 'testcontainers-node.lock')}*)`,
      );
    } finally {
      rmSync(shared, { recursive: true, force: true });
    }
  }, 120_000);
});

