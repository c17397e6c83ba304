/**
 * The base image a team's Dockerfiles build `FROM` where no registry is reachable,
 * `fleetlab/busybox:latest`: a small Debian root made with mmdebstrap, holding Debian's busybox
 * of the suite below with every applet linked, `CMD ["/bin/sh"]`.
 *
 * Not the test images' busybox-static from the machine's own Debian: bookworm's 1.35 is built
 * without wget's `-T` and segfaults on it (exit 139), and `wget -T 5 http://web/` is the first
 * line of many apps' health checks. Trixie's busybox has it.
 *
 * The image config carries a recipe label, so an engine holding the old base (or one made by an
 * older recipe) gets the new one at the next `ensureBaseImage`; the old image keeps the images
 * already built on it and is left for `docker image prune`.
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readFileSync, renameSync } from 'node:fs';
import { chmod, copyFile, lstat, mkdir, mkdtemp, readdir, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { execa } from 'execa';
import { FleetlabError } from '../../src/errors.js';
import { requireTool, tools } from '../../src/tools.js';
import { engineAt } from '../../src/engine-client/engine-at.js';
import { streamDone } from '../../src/engine-client/engine-stream.js';

export const BASE_IMAGE = 'fleetlab/busybox:latest';

/** The first Debian suite whose busybox has `wget -T` (1.36.1-5 and later). */
const BASE_SUITE = 'trixie';
const BASE_PACKAGE = 'busybox';
const DEBIAN_MIRROR = 'http://deb.debian.org/debian';
/** Raised when what goes into the root changes, so engines holding an older base replace it. */
const RECIPE_VERSION = 1;
export const BASE_RECIPE_LABEL = 'io.fleetlab.base-recipe';
export const BASE_RECIPE = `${BASE_SUITE}-${BASE_PACKAGE}-${RECIPE_VERSION}`;

/** Debian's names for the architectures fleetlab builds for, as image configs name them too. */
export type BaseArchitecture = 'amd64' | 'arm64';

export interface BaseImageOptions {
  /**
   * Build for this architecture rather than the engine's own (the arm64 build engine): the
   * image goes in through `POST /images/load`, whose config names it.
   */
  foreignArchitecture?: 'arm64';
  /** Keep the root filesystem tar here, per architecture and recipe, for the next engine. */
  cacheDir?: string;
  mirror?: string;
}

export interface BaseProgress {
  (event: { image: string; step: string }): void;
}

const PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const ETC_FILES: Record<string, string> = {
  'etc/passwd': 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
  'etc/group': 'root:x:0:\nnogroup:x:65534:\n',
  // Without it glibc asks DNS first and stops at its "no such name", so /etc/hosts entries
  // (extra_hosts, the container's own name) that dockerd's resolver does not know would fail.
  'etc/nsswitch.conf': 'passwd: files\ngroup: files\nhosts: files dns\n',
};
/**
 * What a shell-and-wget base does not need of libc6 and busybox (documentation, locales, iconv
 * modules), what mmdebstrap leaves for apt and dpkg, and what it copied from this machine
 * (resolv.conf, hostname) or made here (device nodes): dockerd provides those per container.
 */
const TRIM = ['dev', 'etc/resolv.conf', 'etc/hostname', 'etc/fstab', 'usr/share/doc', 'usr/share/man', 'usr/share/info', 'usr/share/locale', 'usr/share/lintian', 'usr/share/bug', 'var/lib/apt', 'var/cache/apt', 'var/lib/dpkg', 'var/log/apt', 'etc/apt', 'etc/dpkg'];

function hostArchitecture(): BaseArchitecture {
  if (process.arch === 'x64') return 'amd64';
  if (process.arch === 'arm64') return 'arm64';
  throw new FleetlabError('HIL_ERR_BUILD', `${BASE_IMAGE} is made for amd64 and arm64 engines, and this machine is ${process.arch}`);
}

/**
 * Puts BASE_IMAGE into the engine (an import, or a load for a foreign architecture) unless it
 * is there from this recipe; returns whether it (re)made it.
 */
export async function ensureBaseImage(socketPath: string, progress: BaseProgress = () => undefined, o: BaseImageOptions = {}): Promise<boolean> {
  const docker = await engineAt(socketPath);
  const labels = await docker.getImage(BASE_IMAGE).inspect().then((i) => i.Config?.Labels ?? {}, () => undefined);
  if (labels?.[BASE_RECIPE_LABEL] === BASE_RECIPE) return false;
  const architecture = o.foreignArchitecture ?? hostArchitecture();
  progress({ image: BASE_IMAGE, step: labels ? `replacing the image of an older recipe (${labels[BASE_RECIPE_LABEL] ?? 'busybox-static'}) with ${BASE_RECIPE} (${architecture})` : `making it (${BASE_RECIPE}, ${architecture})` });
  const { tarPath, cleanup } = await baseRootfsTar(architecture, progress, o);
  try {
    if (o.foreignArchitecture) await loadForeign(socketPath, tarPath, o.foreignArchitecture);
    else {
      const stream = await docker.importImage(createReadStream(tarPath), { repo: 'fleetlab/busybox', tag: 'latest', changes: [...baseChanges()] });
      await streamDone(docker, stream, { what: `importing ${BASE_IMAGE}` });
    }
  } finally {
    await cleanup();
  }
  const size = await docker.getImage(BASE_IMAGE).inspect().then((i) => `${(i.Size / 1e6).toFixed(1)} MB`, () => 'size unknown');
  progress({ image: BASE_IMAGE, step: `done (${size})` });
  return true;
}

/** The image config, as `docker import --change` takes it. */
function baseChanges(): string[] {
  return ['CMD ["/bin/sh"]', 'WORKDIR /', `ENV ${PATH_ENV}`, `LABEL "${BASE_RECIPE_LABEL}"="${BASE_RECIPE}"`];
}

/** The root filesystem tar: from the cache when there, else made (and cached when asked). */
async function baseRootfsTar(architecture: BaseArchitecture, progress: BaseProgress, o: BaseImageOptions): Promise<{ tarPath: string; cleanup: () => Promise<void> }> {
  const cached = o.cacheDir ? join(o.cacheDir, 'base', `rootfs-${BASE_RECIPE}-${architecture}.tar`) : undefined;
  if (cached && existsSync(cached)) {
    progress({ image: BASE_IMAGE, step: `root filesystem from the cache (${cached})` });
    return { tarPath: cached, cleanup: async () => undefined };
  }
  // Made beside the cache entry, so the rename into place is atomic: a killed build leaves no entry.
  const parent = o.cacheDir ? join(o.cacheDir, 'base') : tmpdir();
  await mkdir(parent, { recursive: true });
  const work = await mkdtemp(join(parent, 'fleetlab-base-'));
  const tarPath = join(work, 'rootfs.tar');
  try {
    await writeBaseRootfsTar(architecture, tarPath, progress, o.mirror ?? DEBIAN_MIRROR);
  } catch (err) {
    await rm(work, { recursive: true, force: true });
    throw err;
  }
  if (!cached) return { tarPath, cleanup: () => rm(work, { recursive: true, force: true }) };
  renameSync(tarPath, cached);
  await rm(work, { recursive: true, force: true });
  return { tarPath: cached, cleanup: async () => undefined };
}

/** Where Debian's C library puts the program loader, per architecture. */
const LOADER: Record<BaseArchitecture, { libDir: string; loader: string }> = {
  amd64: { libDir: 'usr/lib/x86_64-linux-gnu', loader: 'ld-linux-x86-64.so.2' },
  arm64: { libDir: 'usr/lib/aarch64-linux-gnu', loader: 'ld-linux-aarch64.so.1' },
};

/**
 * Debian's busybox and the C library it links, extracted by mmdebstrap (no dpkg, no apt in the
 * image), each applet linked at the path busybox names for it, the rest trimmed. No root
 * needed: mmdebstrap's chrootless mode only downloads and unpacks, and busybox is asked for its
 * applets through the root's own loader rather than in a chroot (an arm64 one through
 * qemu-user's binfmt_misc entry), so a CI runner's user makes the base as root does.
 */
export async function writeBaseRootfsTar(architecture: BaseArchitecture, tarPath: string, progress: BaseProgress, mirror: string): Promise<void> {
  const mmdebstrap = requireTool(tools.mmdebstrap);
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-base-root-'));
  const root = join(dir, 'root');
  try {
    progress({ image: BASE_IMAGE, step: `mmdebstrap: Debian ${BASE_SUITE} ${BASE_PACKAGE} for ${architecture} from ${mirror}` });
    const r = await execa(mmdebstrap, ['--mode=chrootless', '--variant=extract', `--include=${BASE_PACKAGE}`, `--architectures=${architecture}`, BASE_SUITE, root, mirror], { all: true, reject: false });
    if (r.exitCode !== 0) {
      throw new FleetlabError('HIL_ERR_BUILD', `making ${BASE_IMAGE}: mmdebstrap could not fetch Debian ${BASE_SUITE}'s ${BASE_PACKAGE} for ${architecture} from ${mirror} (exit ${r.exitCode}); its last lines:\n${String(r.all).trim().split('\n').slice(-5).join('\n')}`);
    }
    await mergeUsr(root);
    // The applet list comes from the binary itself, run by the root's loader on the root's C library.
    const { libDir, loader } = LOADER[architecture];
    const list = await execa(join(root, libDir, loader), ['--library-path', join(root, libDir), join(root, 'usr/bin/busybox'), '--list-full'], { reject: false });
    if (list.exitCode !== 0) {
      // Not started at all (no loader, or an arm64 one with no qemu-user binfmt entry): execa's message says why.
      const why = list.exitCode === undefined ? `${list.message}${architecture !== hostArchitecture() ? ' (arm64 programs run here through qemu-user: apt-get install qemu-user-static binfmt-support)' : ''}` : `exit ${list.exitCode}: ${String(list.stderr).trim()}`;
      throw new FleetlabError('HIL_ERR_BUILD', `making ${BASE_IMAGE}: busybox --list-full failed in the ${architecture} root (${why})`);
    }
    // linuxrc is busybox as a board's init, at the root: nothing a container runs.
    for (const applet of list.stdout.split('\n').map((l) => l.trim()).filter((l) => /^[a-z0-9_./[-]+$/.test(l) && !l.includes('..') && l !== 'linuxrc')) {
      const at = join(root, applet);
      if (await lstat(at).then(() => true, () => false)) continue;
      await mkdir(dirname(at), { recursive: true });
      await symlink('/bin/busybox', at);
    }
    for (const path of TRIM) await rm(join(root, path), { recursive: true, force: true });
    for (const lib of await readdir(join(root, 'usr/lib'), { withFileTypes: true })) if (lib.isDirectory()) await rm(join(root, 'usr/lib', lib.name, 'gconv'), { recursive: true, force: true });
    for (const d of ['tmp', 'root', 'proc', 'sys', 'dev', 'etc']) await mkdir(join(root, d), { recursive: true });
    await chmod(join(root, 'tmp'), 0o1777);
    for (const [path, text] of Object.entries(ETC_FILES)) await writeFile(join(root, path), text);
    await execa('tar', ['-C', root, '--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner', '-cf', tarPath, '.']);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * The extract variant installs no base-files, which makes /bin, /sbin and /lib* links into
 * /usr on a merged-/usr Debian: the programs' loader path (/lib64/ld-linux-x86-64.so.2,
 * /lib/ld-linux-aarch64.so.1) needs them. Every link is relative, so paths joined under the
 * root below never leave it.
 */
async function mergeUsr(root: string): Promise<void> {
  for (const d of ['bin', 'sbin', 'lib', 'lib64']) {
    const at = join(root, d);
    const link = await readlink(at).catch(() => undefined);
    if (link !== undefined) {
      if (isAbsolute(link)) throw new FleetlabError('HIL_ERR_BUILD', `making ${BASE_IMAGE}: /${d} in the extracted root links to ${link}, outside it`);
      continue;
    }
    if (await lstat(at).then(() => true, () => false)) continue;
    // lib64 only where the loader lives there (amd64); busybox puts applets in /sbin, which may not exist yet.
    if (d === 'lib64' && !existsSync(join(root, 'usr', d))) continue;
    await mkdir(join(root, 'usr', d), { recursive: true });
    await symlink(`usr/${d}`, at);
  }
}

/**
 * `POST /images/create?fromSrc` records the engine's own architecture whatever it is told, so a
 * foreign base goes in through `POST /images/load` as an image archive whose config names the
 * architecture; images built `FROM` it inherit it, and a board's engine pulls them as its own.
 */
async function loadForeign(socketPath: string, layerTar: string, architecture: 'arm64'): Promise<void> {
  const docker = await engineAt(socketPath);
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-base-archive-'));
  try {
    const archive = join(dir, 'archive');
    await mkdir(archive);
    await copyFile(layerTar, join(archive, 'layer.tar'));
    const diffId = `sha256:${createHash('sha256').update(readFileSync(join(archive, 'layer.tar'))).digest('hex')}`;
    const config = JSON.stringify({
      architecture,
      os: 'linux',
      created: '1970-01-01T00:00:00Z',
      config: { Cmd: ['/bin/sh'], WorkingDir: '/', Env: [PATH_ENV], Labels: { [BASE_RECIPE_LABEL]: BASE_RECIPE } },
      rootfs: { type: 'layers', diff_ids: [diffId] },
      history: [{ created: '1970-01-01T00:00:00Z', created_by: `fleetlab: Debian ${BASE_SUITE} ${BASE_PACKAGE} (${architecture})` }],
    });
    const configName = `${createHash('sha256').update(config).digest('hex')}.json`;
    await writeFile(join(archive, configName), config);
    await writeFile(join(archive, 'manifest.json'), JSON.stringify([{ Config: configName, RepoTags: [BASE_IMAGE], Layers: ['layer.tar'] }]));
    await execa('tar', ['-C', archive, '-cf', join(dir, 'image.tar'), '.']);
    const stream = await docker.loadImage(createReadStream(join(dir, 'image.tar')), { quiet: true });
    await streamDone(docker, stream, { what: `loading ${BASE_IMAGE} (${architecture})` });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
