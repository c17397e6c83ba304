/**
 * Small local test images (no registry is reachable): a root filesystem holding Debian's
 * static busybox, imported into the engine through the Engine API (`POST /images/create`
 * with `fromSrc=-`), so it works on dockerd and on the simulated engine alike.
 */
import { createReadStream } from 'node:fs';
import { mkdtemp, mkdir, copyFile, symlink, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { requireTool, tools } from '../../src/tools.js';
import { engineAt } from '../../src/engine-client/engine-at.js';
import { streamDone } from '../../src/engine-client/engine-stream.js';

export interface TestImage {
  ref: string;
  /** What the default command prints each tick, so two versions are told apart in logs. */
  banner: string;
}

export const testImages: readonly TestImage[] = [
  { ref: 'fleetlab/test-app:1', banner: 'test-app v1' },
  { ref: 'fleetlab/test-app:2', banner: 'test-app v2' },
];

const TEST_APPLETS = ['sh', 'sleep', 'echo', 'cat', 'ls', 'date', 'touch', 'rm', 'mkdir', 'env', 'wget', 'flock', 'true', 'false', 'grep', 'printenv', 'kill'];

/**
 * The default command: runs until stopped, logs a line every 2 s, and exits at once on
 * SIGTERM (PID 1 ignores signals without a handler, which would make every stop wait 10 s).
 */
export function defaultCommand(banner: string): string[] {
  return ['/bin/sh', '-c', `trap 'echo "${banner}: stopping"; exit 0' TERM INT; echo "${banner}: started"; i=0; while :; do i=$((i+1)); echo "${banner}: tick $i"; sleep 2 & wait $!; done`];
}

/**
 * Writes the test images' root filesystem as a tar: `busybox` (a static build, for the
 * engine's architecture) plus its applets. The QEMU image passes an arm64 busybox.
 */
export async function writeTestRootfsTar(busybox: string, tarPath: string, applets: readonly string[] = TEST_APPLETS): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-rootfs-'));
  try {
    const root = join(dir, 'rootfs');
    for (const d of ['bin', 'tmp', 'data', 'etc', 'proc', 'sys', 'dev']) await mkdir(join(root, d), { recursive: true });
    await copyFile(busybox, join(root, 'bin/busybox'));
    for (const a of applets) await symlink('busybox', join(root, 'bin', a));
    await writeFile(join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
    // Same bytes for the same inputs: the QEMU image key hashes this tar.
    await execa('tar', ['-C', root, '--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner', '-cf', tarPath, '.']);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function rootfsTar(): Promise<{ tarPath: string; cleanup: () => Promise<void> }> {
  const busybox = requireTool(tools.busybox);
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-rootfs-tar-'));
  const tarPath = join(dir, 'rootfs.tar');
  await writeTestRootfsTar(busybox, tarPath);
  return { tarPath, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export interface BuildProgress {
  (event: { image: string; step: string }): void;
}

/** Builds (or rebuilds) every test image in the engine at socketPath; returns their refs. */
export async function buildTestImages(socketPath: string, progress: BuildProgress = () => undefined): Promise<string[]> {
  await importBusyboxImages(socketPath, testImages.map((i) => ({ ref: i.ref, changes: testImageChanges(i) })), progress);
  return testImages.map((i) => i.ref);
}

/**
 * Imports only the test images the engine lacks (or holds with another default command): a
 * start that reuses them leaves no untagged copy behind, as a rebuild on every start would.
 */
export async function ensureTestImages(socketPath: string, progress: BuildProgress = () => undefined): Promise<void> {
  const docker = await engineAt(socketPath);
  const stale: TestImage[] = [];
  for (const image of testImages) {
    const cmd = await docker.getImage(image.ref).inspect().then((i) => i.Config?.Cmd, () => undefined);
    if (JSON.stringify(cmd) !== JSON.stringify(defaultCommand(image.banner))) stale.push(image);
  }
  if (stale.length > 0) await importBusyboxImages(socketPath, stale.map((i) => ({ ref: i.ref, changes: testImageChanges(i) })), progress);
}

const busyboxChanges = (cmd: readonly string[]) => [`CMD ${JSON.stringify(cmd)}`, 'WORKDIR /'];

/** The image config a test image is imported with (`docker import --change` each). */
export function testImageChanges(image: TestImage): string[] {
  return busyboxChanges(defaultCommand(image.banner));
}

/** `host:5000/app:1` as the Engine API's import takes it: the tag after the last colon of the last path part. */
export function splitRef(ref: string): { repo: string; tag: string } {
  const slash = ref.lastIndexOf('/');
  const colon = ref.lastIndexOf(':');
  return colon > slash ? { repo: ref.slice(0, colon), tag: ref.slice(colon + 1) } : { repo: ref, tag: 'latest' };
}

/**
 * Images that stand in for ones a replay cannot have (`fleetlab replay`): the busybox root
 * filesystem, so they run on dockerd too, with the captured image's config given as import
 * changes (`CMD [...]`, `LABEL "k"="v"`...); its further tags added.
 */
export async function importStandInImages(socketPath: string, images: ReadonlyArray<{ tags: readonly string[]; changes: readonly string[] }>, progress: BuildProgress = () => undefined): Promise<void> {
  await importBusyboxImages(socketPath, images.map((i) => ({ ref: i.tags[0]!, changes: i.changes })), progress);
  const docker = await engineAt(socketPath);
  for (const image of images) {
    for (const extra of image.tags.slice(1)) await docker.getImage(image.tags[0]!).tag(splitRef(extra));
  }
}

/** Imports the busybox root filesystem once per image, each with its own config. */
async function importBusyboxImages(socketPath: string, images: ReadonlyArray<{ ref: string; changes: readonly string[] }>, progress: BuildProgress): Promise<void> {
  const docker = await engineAt(socketPath);
  const { tarPath, cleanup } = await rootfsTar();
  try {
    for (const image of images) {
      const { repo, tag } = splitRef(image.ref);
      progress({ image: image.ref, step: 'importing' });
      const stream = await docker.importImage(createReadStream(tarPath), { repo, tag, changes: [...image.changes] });
      await streamDone(docker, stream, { what: `importing ${image.ref}` });
      progress({ image: image.ref, step: 'done' });
    }
  } finally {
    await cleanup();
  }
}

/**
 * The image the harness runs short-lived file helpers in (hil/targets/engine-files.ts): the test
 * images' busybox (sh with its test and printf builtins, cat, mkdir, rm), default command `sh`.
 */
export const FILES_IMAGE = 'fleetlab/files:1';

/**
 * The image of a simulated device's host-network container (sim/host-network.ts): the test
 * images' busybox, sleeping until stopped, and exiting at once on SIGTERM (PID 1 ignores
 * signals it has no handler for, which would make every stop wait its whole grace period).
 */
export const HOST_NETWORK_IMAGE = 'fleetlab/host-network:1';
export const HOST_NETWORK_COMMAND: readonly string[] = ['/bin/sh', '-c', "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"];

/** Imports HOST_NETWORK_IMAGE into the engine unless it is there with its command. */
export async function ensureHostNetworkImage(socketPath: string): Promise<void> {
  const docker = await engineAt(socketPath);
  const cmd = await docker.getImage(HOST_NETWORK_IMAGE).inspect().then((i) => i.Config?.Cmd, () => undefined);
  if (JSON.stringify(cmd) === JSON.stringify(HOST_NETWORK_COMMAND)) return;
  await importBusyboxImages(socketPath, [{ ref: HOST_NETWORK_IMAGE, changes: busyboxChanges(HOST_NETWORK_COMMAND) }], () => undefined);
}

/** Imports FILES_IMAGE into the engine unless it is there. */
export async function ensureFilesImage(socketPath: string): Promise<void> {
  const docker = await engineAt(socketPath);
  if (await docker.getImage(FILES_IMAGE).inspect().then(() => true, () => false)) return;
  await importBusyboxImages(socketPath, [{ ref: FILES_IMAGE, changes: busyboxChanges(['/bin/sh']) }], () => undefined);
}
