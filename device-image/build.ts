/**
 * `fleetlab qemu build`: the bootable Raspberry Pi 3 image, in two cached layers under
 * `<cache>/qemu/` (outside the checkout, see ../tools.ts `cacheRoot`):
 *
 * - `rootfs-<key>/`: Debian arm64 with the kernel, built by mmdebstrap (./rootfs.ts).
 *   Minutes; rebuilt only when the package list, suite, mirror or initramfs modules change.
 * - `image-<key>/`: that root filesystem plus fleetlab's payload (Node 24, the supervisor
 *   bundle, units, configs, the test app images, the SSH key) as an ext4 SD card image made
 *   with `mke2fs -d` (no loop mount), beside the kernel, initramfs and device tree QEMU boots.
 *   Its key hashes every byte of the payload, so an unchanged rebuild only hashes: seconds.
 *
 * Each layer is assembled in a temporary directory and renamed into place when complete, so a
 * failed or interrupted build never leaves a half image under a valid key. Runs boot from a
 * copy-on-write overlay of `sd.img` (../boot.ts); the image itself is never written.
 */
import { createHash } from 'node:crypto';
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { execa } from 'execa';
import { withBuildLock } from '../src/build-lock.js';
import { FleetlabError } from '../src/errors.js';
import { writeTestRootfsTar } from '../sim/images/test-images.js';
import { cacheRoot, needTool, qemuTools } from './tools.js';
import { requirePayloadSource } from './payload.js';
import { stageSupervisor } from './supervisor-payload.js';
import { BOARD_OS_UNITS, boardOsFiles, DEFAULT_MIRROR, DEFAULT_SUITE, DISABLED_UNITS, ENABLED_UNITS, GUEST, IMAGE_RECIPE_VERSION, MASKED_GENERATORS, MASKED_UNITS, NODE_PACKAGE, SD_SIZE_BYTES, overlayFiles, rootfsKey, UDEV_TRIGGER_UNIT, udevTriggerDropIn } from './recipe.js';
import { bootFiles, buildRootfs } from './rootfs.js';
import { buildInitramfs, INITRAMFS_VERSION, initScript, ROOT_MODULES } from './initramfs.js';

export interface BuildProgress {
  readonly stage: 'rootfs' | 'payload' | 'assemble' | 'sdcard' | 'done' | 'wait';
  /** Of the whole build, 0-100. */
  readonly percent: number;
  readonly elapsedMs: number;
  readonly detail: string;
}

/** One progress line: `[ 73%   11 s] payload: bundling the supervisor`. */
export function formatBuildProgress(e: BuildProgress): string {
  return `[${String(e.percent).padStart(3)}% ${(e.elapsedMs / 1000).toFixed(0).padStart(4)} s] ${e.stage}: ${e.detail}`;
}

export interface ImageBuildOptions {
  /** The fleetlab whose supervisor goes onto the board: a checkout, or an installed package with its prebuilt payload. */
  readonly repoRoot: string;
  /** Default `<cacheRoot()>/qemu`. */
  readonly cacheDir?: string;
  readonly suite?: string;
  readonly mirror?: string;
  /** Rebuild both layers even when cached. */
  readonly force?: boolean;
  /**
   * The board's operating system without anything of fleetlab's (no Node, supervisor, units
   * or test images): the stand-in for a fresh Pi that `fleetlab board install` is proved on.
   * Kept as `bare-<key>/` beside the supervised `image-<key>/`.
   */
  readonly bare?: boolean;
  readonly progress?: (event: BuildProgress) => void;
}

/** What `qemu boot` needs: the files of one built image. */
export interface QemuImage {
  readonly key: string;
  readonly dir: string;
  readonly sdImage: string;
  readonly kernel: string;
  readonly initrd: string;
  readonly dtb: string;
  /** The private half of the key in the image's `/root/.ssh/authorized_keys`. */
  readonly sshKey: string;
  readonly manifest: ImageManifest;
  /** The kernel's root= when the disk is partitioned (a card image, ../flash-boot.ts); default the whole disk. */
  readonly root?: string;
  /** The disk's size as the board sees it, when larger than sdImage (a card bigger than the image flashed onto it). */
  readonly diskBytes?: number;
  /** Where the supervisor's config.txt and system-proxy/ are on this image; default GUEST.bootDir. */
  readonly bootDir?: string;
}

export interface ImageManifest {
  readonly key: string;
  readonly rootfsKey: string;
  readonly suite: string;
  readonly kernelVersion: string;
  readonly node: string;
  readonly runtimePackages: readonly string[];
  readonly sdSizeBytes: number;
  readonly builtAt: string;
  /** How long each layer took in the build that made it (0: reused). */
  readonly timings: { readonly rootfsMs: number; readonly imageMs: number };
}

export interface BuildResult {
  readonly image: QemuImage;
  readonly builtRootfs: boolean;
  readonly builtImage: boolean;
  readonly totalMs: number;
}

/** The share of the whole build each stage takes on a cold run, for the percentage. */
const SPAN = { rootfs: [0, 70], payload: [70, 76], assemble: [76, 84], sdcard: [84, 100] } as const;

const MANIFEST = 'manifest.json';

export function imageFromDir(dir: string): QemuImage {
  const manifest = JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8')) as ImageManifest;
  return {
    key: manifest.key,
    dir,
    sdImage: join(dir, 'sd.img'),
    kernel: join(dir, 'vmlinuz'),
    initrd: join(dir, 'initrd.img'),
    dtb: join(dir, 'bcm2837-rpi-3-b.dtb'),
    sshKey: join(dir, 'id_ed25519'),
    manifest,
  };
}

/** The newest complete image (or bare image) in the cache, or undefined (then `qemu build` first). */
export function latestImage(cacheDir = join(cacheRoot(), 'qemu'), bare = false): QemuImage | undefined {
  if (!existsSync(cacheDir)) return undefined;
  const pattern = bare ? /^bare-[0-9a-f]{16}$/ : /^image-[0-9a-f]{16}$/;
  const dirs = readdirSync(cacheDir)
    .filter((d) => pattern.test(d) && existsSync(join(cacheDir, d, MANIFEST)))
    .map((d) => join(cacheDir, d))
    .sort((a, b) => statSync(join(b, MANIFEST)).mtimeMs - statSync(join(a, MANIFEST)).mtimeMs);
  return dirs[0] ? imageFromDir(dirs[0]) : undefined;
}

/** The SSH key pair the harness logs in with; one per cache, made on first use. */
export function sshKeyPair(cacheDir: string): { privateKey: string; publicKey: string } {
  const dir = join(cacheDir, 'ssh');
  const priv = join(dir, 'id_ed25519');
  const pub = `${priv}.pub`;
  if (!existsSync(priv) || !existsSync(pub)) {
    // ssh2 is CommonJS without named ESM exports; its key generator writes OpenSSH format.
    const { utils } = createRequire(import.meta.url)('ssh2') as { utils: { generateKeyPairSync(type: 'ed25519', o: { comment: string }): { private: string; public: string } } };
    const pair = utils.generateKeyPairSync('ed25519', { comment: 'fleetlab-hil' });
    mkdirSync(dir, { recursive: true });
    writeFileSync(`${priv}.tmp`, pair.private, { mode: 0o600 });
    writeFileSync(pub, `${pair.public}\n`);
    renameSync(`${priv}.tmp`, priv);
  }
  return { privateKey: readFileSync(priv, 'utf8'), publicKey: readFileSync(pub, 'utf8') };
}

export function hashTree(h: ReturnType<typeof createHash>, root: string, rel = ''): void {
  for (const name of readdirSync(join(root, rel)).sort()) {
    const path = join(root, rel, name);
    const st = statSync(path);
    if (st.isDirectory()) hashTree(h, root, join(rel, name));
    else h.update(`${join(rel, name)}\0${st.mode & 0o777}\0`).update(readFileSync(path)).update('\0');
  }
}

export type ReportProgress = (stage: BuildProgress['stage'], fraction: number, detail: string) => void;

/**
 * Runs a build under the image lock (image builds share the root filesystem layer), turning
 * each stage's fraction into a percentage of the whole by `spans`, and saying a long step is
 * still going (with the elapsed time) every 20 s, since such a step prints nothing for minutes.
 */
export async function withImageBuild<T>(spans: Readonly<Record<string, readonly [number, number]>>, progress: ((e: BuildProgress) => void) | undefined, run: (report: ReportProgress, started: number) => Promise<T>): Promise<T> {
  const started = Date.now();
  let last: BuildProgress | undefined;
  const report: ReportProgress = (stage, fraction, detail) => {
    const span = spans[stage] ?? [100, 100];
    last = { stage, percent: Math.round(span[0] + (span[1] - span[0]) * Math.min(1, Math.max(0, fraction))), elapsedMs: Date.now() - started, detail };
    progress?.(last);
  };
  const heartbeat = setInterval(() => last && progress?.({ ...last, elapsedMs: Date.now() - started, detail: `${last.detail} (still running)` }), 20_000);
  try {
    return await withBuildLock('fleetlab-qemu-image', (_stage, detail) => report('wait', 0, detail), () => run(report, started), 90 * 60_000);
  } finally {
    clearInterval(heartbeat);
  }
}

export function buildImage(options: ImageBuildOptions): Promise<BuildResult> {
  return withImageBuild(SPAN, options.progress, (report, started) => build(options, started, report));
}

async function build(options: ImageBuildOptions, started: number, report: ReportProgress): Promise<BuildResult> {
  const repoRoot = resolve(options.repoRoot);
  const source = requirePayloadSource(repoRoot, NODE_PACKAGE);
  const cacheDir = options.cacheDir ?? join(cacheRoot(), 'qemu');
  const suite = options.suite ?? DEFAULT_SUITE;
  const mirror = options.mirror ?? DEFAULT_MIRROR;
  mkdirSync(cacheDir, { recursive: true });

  // Layer 1: the Debian root filesystem.
  const { rootfs, rootfsKey: rKey, built: builtRootfs, ms: rootfsMs } = await ensureRootfs({ cacheDir, suite, mirror, force: options.force, report: (f, d) => report('rootfs', f, d) });
  const boot = bootFiles(rootfs);

  // Layer 2: the payload, staged apart so its hash is the image key.
  const t1 = Date.now();
  const stage = join(cacheDir, `payload.tmp-${process.pid}`);
  rmSync(stage, { recursive: true, force: true });
  const keys = sshKeyPair(cacheDir);
  const enabledUnits = options.bare ? BOARD_OS_UNITS : ENABLED_UNITS;
  const prefix = options.bare ? 'bare-' : 'image-';
  try {
    let node = 'none';
    let runtimePackages: string[] = [];
    if (options.bare) {
      report('payload', 0.5, 'the board\'s operating system only: no Node, supervisor or test images (fleetlab board install adds them)');
      writeImageFiles(stage, boardOsFiles(keys.publicKey));
    } else {
      const staged = await stageSupervisor({ repoRoot, source, cacheDir, stage, report: (f, d) => report('payload', f, d) });
      node = staged.node;
      runtimePackages = staged.runtimePackages;
      writeImageFiles(stage, overlayFiles(keys.publicKey));
      const testTar = join(stage, GUEST.testImageTar);
      mkdirSync(dirname(testTar), { recursive: true });
      await writeTestRootfsTar(join(rootfs, 'bin', 'busybox'), testTar);
    }
    writeImageFiles(stage, [udevTriggerDropIn(readFileSync(join(rootfs, UDEV_TRIGGER_UNIT), 'utf8'))]);

    // The key: the payload's bytes plus what the assembly does with them.
    const h = createHash('sha256').update(`${IMAGE_RECIPE_VERSION}\0${rKey}\0${SD_SIZE_BYTES}\0${JSON.stringify([enabledUnits, DISABLED_UNITS, MASKED_UNITS, MASKED_GENERATORS])}\0update-done stamps\0${INITRAMFS_VERSION}\0${initScript(ROOT_MODULES)}\0`);
    hashTree(h, stage, '');
    const key = h.digest('hex').slice(0, 16);
    const dir = join(cacheDir, `${prefix}${key}`);
    if (!options.force && existsSync(join(dir, MANIFEST))) {
      report('done', 1, `${prefix}${key} cached`);
      return { image: imageFromDir(dir), builtRootfs, builtImage: false, totalMs: Date.now() - started };
    }

    // Assemble: a copy of the rootfs with the payload on top, then the SD card.
    const work = `${dir}.tmp-${process.pid}`;
    rmSync(work, { recursive: true, force: true });
    mkdirSync(work, { recursive: true });
    const tree = join(work, 'rootfs');
    report('assemble', 0, `copying rootfs-${rKey} and adding the payload`);
    await assembleTree({ rootfs, stage, tree, enabledUnits, disabledUnits: DISABLED_UNITS, masked: { units: MASKED_UNITS, generators: MASKED_GENERATORS } });
    const dirs = options.bare ? ['var/log/journal'] : ['var/log/journal', `${GUEST.bootDir.slice(1)}/system-proxy`, GUEST.dataDir.slice(1)];
    for (const d of dirs) mkdirSync(join(tree, d), { recursive: true });
    chmodSync(join(tree, 'root/.ssh'), 0o700);
    writeUpdateDoneStamps(tree);
    for (const [from, to] of [[boot.kernel, 'vmlinuz'], [boot.dtb, 'bcm2837-rpi-3-b.dtb']] as const) cpSync(from, join(work, to));
    writeFileSync(join(work, 'initrd.img'), await buildInitramfs({ rootfs, kernelVersion: boot.kernelVersion }));
    writeFileSync(join(work, 'id_ed25519'), keys.privateKey, { mode: 0o600 });

    report('sdcard', 0, `mke2fs -d: ${SD_SIZE_BYTES / 1024 ** 3} GiB ext4 SD card image`);
    const sd = join(work, 'sd.img');
    writeFileSync(sd, '');
    await execa('truncate', ['-s', String(SD_SIZE_BYTES), sd]);
    const mk = await execa(needTool(qemuTools.mke2fs), ['-q', '-F', '-t', 'ext4', '-L', 'fleetlab-root', '-d', tree, sd], { reject: false, all: true });
    if (mk.exitCode !== 0) throw new FleetlabError('SUP_ERR_INTERNAL', `mke2fs -d failed: ${mk.all?.trim()}`);
    rmSync(tree, { recursive: true, force: true });
    const manifest: ImageManifest = {
      key,
      rootfsKey: rKey,
      suite,
      kernelVersion: boot.kernelVersion,
      node,
      runtimePackages,
      sdSizeBytes: SD_SIZE_BYTES,
      builtAt: new Date().toISOString(),
      timings: { rootfsMs, imageMs: Date.now() - t1 },
    };
    writeFileSync(join(work, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
    rmSync(dir, { recursive: true, force: true });
    renameSync(work, dir);
    pruneSiblings(cacheDir, prefix, dir, 2);
    report('done', 1, `${prefix}${key} built`);
    return { image: imageFromDir(dir), builtRootfs, builtImage: true, totalMs: Date.now() - started };
  } finally {
    rmSync(stage, { recursive: true, force: true });
    for (const d of readdirSync(cacheDir)) if (d.endsWith(`.tmp-${process.pid}`)) rmSync(join(cacheDir, d), { recursive: true, force: true });
  }
}

/** The cached Debian root filesystem for `suite` (layer 1), built first when missing or forced; shared by `qemu build` and `card build`. */
export async function ensureRootfs(o: { cacheDir: string; suite: string; mirror: string; force?: boolean | undefined; report: (fraction: number, detail: string) => void }): Promise<{ rootfs: string; rootfsKey: string; built: boolean; ms: number }> {
  const rKey = rootfsKey({ suite: o.suite, mirror: o.mirror });
  const rootfs = join(o.cacheDir, `rootfs-${rKey}`);
  if (!o.force && existsSync(join(rootfs, 'etc', 'os-release'))) {
    o.report(1, `rootfs-${rKey} cached`);
    return { rootfs, rootfsKey: rKey, built: false, ms: 0 };
  }
  const t0 = Date.now();
  const tmp = `${rootfs}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  await buildRootfs({ target: tmp, suite: o.suite, mirror: o.mirror, report: o.report });
  rmSync(rootfs, { recursive: true, force: true });
  renameSync(tmp, rootfs);
  pruneSiblings(o.cacheDir, 'rootfs-', rootfs);
  return { rootfs, rootfsKey: rKey, built: true, ms: Date.now() - t0 };
}

/** A copy of the root filesystem with the staged payload on top and units enabled and disabled as `systemctl` would. */
export async function assembleTree(o: { rootfs: string; stage: string; tree: string; enabledUnits: ReadonlyArray<{ wantedBy: string; unit: string; source: string }>; disabledUnits: readonly string[]; masked?: { units: readonly string[]; generators: readonly string[] } }): Promise<void> {
  await execa('cp', ['-a', '--reflink=auto', o.rootfs, o.tree]);
  await execa('cp', ['-a', `${o.stage}/.`, o.tree]);
  for (const wants of o.disabledUnits) rmSync(join(o.tree, 'etc/systemd/system', wants), { force: true });
  const masks = [...(o.masked?.units ?? []).map((u) => join('etc/systemd/system', u)), ...(o.masked?.generators ?? []).map((g) => join('etc/systemd/system-generators', g))];
  for (const mask of masks) {
    mkdirSync(dirname(join(o.tree, mask)), { recursive: true });
    rmSync(join(o.tree, mask), { force: true });
    symlinkSync('/dev/null', join(o.tree, mask));
  }
  for (const u of o.enabledUnits) {
    const link = join(o.tree, 'etc/systemd/system', `${u.wantedBy}.wants`, u.unit);
    mkdirSync(dirname(link), { recursive: true });
    rmSync(link, { force: true });
    symlinkSync(u.source, link);
  }
}

/**
 * What systemd-update-done writes once /etc and /var have caught up with /usr: without it
 * every boot of an image (each ready state's first boot, a bare board's) runs ldconfig,
 * sysusers, the journal catalog rebuild and update-done itself first, seconds under TCG. The
 * stamp holds /usr's modification time as the image has it (ConditionNeedsUpdate= compares).
 */
export function writeUpdateDoneStamps(tree: string): void {
  const usr = statSync(join(tree, 'usr'), { bigint: true }).mtimeNs;
  const text = `# This file was created by systemd-update-done. Its only\n# purpose is to hold a timestamp of the time this directory\n# was updated. See man:systemd-update-done.service(8).\nTIMESTAMP_NSEC=${usr}\n`;
  for (const dir of ['etc', 'var']) writeFileSync(join(tree, dir, '.updated'), text);
}

export function writeImageFiles(stage: string, files: ReadonlyArray<{ path: string; content: string; mode: number }>): void {
  for (const f of files) {
    const path = join(stage, f.path);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, f.content);
    chmodSync(path, f.mode);
  }
}

/**
 * Older layers of the same kind go, newest `keep` stay: a booted overlay still reads the image
 * it was made from, so the previous image is kept for runs in progress.
 */
export function pruneSiblings(cacheDir: string, prefix: string, current: string, keep = 1): void {
  const others = readdirSync(cacheDir)
    .filter((d) => d.startsWith(prefix) && /^[a-z0-9]+-[0-9a-f]{16}$/.test(d) && join(cacheDir, d) !== current)
    .map((d) => join(cacheDir, d))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  for (const d of others.slice(keep - 1)) rmSync(d, { recursive: true, force: true });
}
