/**
 * The test app images (fleetlab/test-app:1 and :2) on a lab board: the specs deploy them, and
 * no registry is reachable from a board. A board set up by `fleetlab board install` has none
 * (they are the harness's, not the supervisor's), so the `board` target imports them over SSH
 * once per worker: Debian's static busybox for the board's architecture as a root filesystem,
 * streamed into `docker import`, as the emulated Pi's first boot does from its own disk.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FleetlabError } from '../../src/errors.js';
import { ownerRecord, reapStale, writeOwner } from '../../src/owned-dirs.js';
import { requireTool, tools } from '../../src/tools.js';
import { testImageChanges, testImages, writeTestRootfsTar } from '../../sim/images/test-images.js';
import { arm64Busybox } from '../release/build-engine.js';
import type { SshDevice } from '../../device-access/ssh-device.js';

const IMPORT_MS = 300_000;
const DIR_PREFIX = 'fleetlab-board-images-';

/** Imports the test images the board lacks; returns the refs it imported. */
export async function ensureBoardTestImages(ssh: SshDevice, progress: (line: string) => void = () => undefined): Promise<string[]> {
  // A worker killed while importing left its directory (a 2 MB root filesystem): the next worker removes it.
  await reapStale(tmpdir(), DIR_PREFIX);
  const missing: string[] = [];
  for (const image of testImages) {
    if ((await ssh.run(['docker', 'image', 'inspect', image.ref], { timeoutMs: 60_000 })).exitCode !== 0) missing.push(image.ref);
  }
  if (missing.length === 0) return [];
  const arch = (await ssh.run(['uname', '-m'])).stdout.trim();
  const busybox = arch === 'aarch64' ? await arm64Busybox() : arch === process.arch.replace('x64', 'x86_64') ? requireTool(tools.busybox) : undefined;
  if (!busybox) throw new FleetlabError('SUP_ERR_HOST', `the board ${ssh.where} is ${arch}: the harness has test app images for aarch64 (and for this host's own architecture) only`);
  const dir = await mkdtemp(join(tmpdir(), DIR_PREFIX));
  writeOwner(dir, ownerRecord());
  try {
    const tarPath = join(dir, 'rootfs.tar');
    await writeTestRootfsTar(busybox, tarPath);
    const tar = await readFile(tarPath);
    for (const image of testImages.filter((i) => missing.includes(i.ref))) {
      progress(`importing ${image.ref} (busybox, ${arch}) on ${ssh.where}`);
      const argv = ['docker', 'import', ...testImageChanges(image).flatMap((c) => ['--change', c]), '-', image.ref];
      const r = await ssh.run(argv, { input: tar, timeoutMs: IMPORT_MS });
      if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `importing ${image.ref} on ${ssh.where} failed (exit ${r.exitCode}): ${r.stderr.trim() || r.stdout.trim()}`);
    }
    return missing;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
