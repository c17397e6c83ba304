/**
 * The test app images on a lab board (hil/targets/board-test-images.ts): a worker killed while
 * importing them leaves its directory, which the next worker's check removes; a live worker's
 * directory and one that is not provably a run's stay.
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureBoardTestImages } from '../hil/targets/board-test-images.js';
import { ownerRecord, writeOwner } from '../src/owned-dirs.js';
import type { SshDevice } from '../device-access/ssh-device.js';

describe('the test images on a lab board', () => {
  const saved = process.env.TMPDIR;
  let dir: string | undefined;
  afterEach(() => {
    process.env.TMPDIR = saved;
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("removes what a killed worker's import left, and leaves a live one's and an unowned one alone", async () => {
    dir = mkdtempSync(join(tmpdir(), 'fleetlab-images-test-'));
    const made = (name: string, owner?: number) => {
      mkdirSync(join(dir!, name));
      writeFileSync(join(dir!, name, 'rootfs.tar'), 'x');
      if (owner !== undefined) writeOwner(join(dir!, name), { owner });
    };
    // A pid past the kernel's limit is no process: the owner is gone.
    made('fleetlab-board-images-killed', 2 ** 22 + 1);
    made('fleetlab-board-images-alive');
    writeOwner(join(dir, 'fleetlab-board-images-alive'), ownerRecord());
    made('fleetlab-board-images-unowned');
    process.env.TMPDIR = dir;
    // Every image already on the board: nothing to import.
    const ssh = { where: 'root@board', run: async () => ({ exitCode: 0, stdout: '', stderr: '' }) } as unknown as SshDevice;
    expect(await ensureBoardTestImages(ssh)).toEqual([]);
    expect(readdirSync(dir).sort()).toEqual(['fleetlab-board-images-alive', 'fleetlab-board-images-unowned']);
  });
});
