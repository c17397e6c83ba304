/**
 * `fleetlab card build --board rpi3|rpi4`: a card image to flash with `dd` or the Raspberry
 * Pi Imager. An MBR with two partitions:
 *
 * 1. FAT32 `FLEETBOOT`: the Raspberry Pi firmware (Debian's raspi-firmware package, fetched
 *    with the host's apt from the Debian mirror, signatures checked), Debian's arm64 kernel,
 *    initramfs and the board's device trees, `config.txt`, `cmdline.txt`, and `fleetlab.txt`,
 *    the first-boot settings the user edits.
 * 2. ext4 `fleetlab-root`: the same Debian root filesystem the emulated Pi boots (the cached
 *    layer of ./build.ts), laid out as `fleetlab board install` lays out a board,
 *    with a first-boot unit that grows it to the card and applies `fleetlab.txt`.
 *
 * No loop device or mount: `mkfs.vfat --offset` and `mcopy` write the FAT partition inside the
 * image file, `mke2fs -E offset= -d` the ext4 one. Built under the cache (keyed by every input
 * byte) and copied to `--out`.
 */
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, openSync, closeSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { execa } from 'execa';
import { FleetlabError } from '../src/errors.js';
import { fleetlabVersion } from '../src/package-root.js';
import { assembleTree, ensureRootfs, formatBuildProgress, hashTree, pruneSiblings, withImageBuild, writeImageFiles, type BuildProgress, type ReportProgress } from './build.js';
import { requirePayloadSource } from './payload.js';
import { DEFAULT_MIRROR, DEFAULT_SUITE, DISABLED_UNITS, NODE_PACKAGE } from './recipe.js';
import { bootFiles } from './rootfs.js';
import { cacheRoot, needTool, qemuTools } from './tools.js';
import type { ToolSpec } from '../src/tools.js';
import { BOOT_INITRD, BOOT_KERNEL, BOOT_LABEL, cardLayout, cmdlineTxt, configTxt, FLASH_BOARDS, FLASH_ENABLED_UNITS, FLASH_KEEPS_ENABLED, flashRootFiles, mbrBytes, PROVISION_FILE, provisionTemplate, ROOT_LABEL, SECTOR, type CardLayout, type FlashBoard } from './card-plan.js';
import { stageSupervisor } from './supervisor-payload.js';

export { formatBuildProgress };

export interface FlashImageOptions {
  readonly repoRoot: string;
  readonly board: FlashBoard;
  /** Where the image is written; default `./fleetlab-<board>.img`. */
  readonly out?: string;
  readonly suite?: string;
  readonly mirror?: string;
  readonly force?: boolean;
  readonly progress?: (event: BuildProgress) => void;
}

export interface FlashImageManifest {
  readonly key: string;
  readonly board: FlashBoard;
  readonly version: string;
  readonly suite: string;
  readonly kernelVersion: string;
  readonly node: string;
  readonly firmware: string;
  readonly layout: CardLayout;
  readonly builtAt: string;
}

export interface FlashImageResult {
  /** The image at `--out`. */
  readonly image: string;
  readonly manifest: FlashImageManifest;
  readonly built: boolean;
  readonly totalMs: number;
}

export const FLASH_RECIPE_VERSION = 'flash/1';
/** Room for the firmware, two kernels and their initramfs (an upgrade writes the new one beside the old). */
const BOOT_PARTITION_BYTES = 256 * 1024 ** 2;
const MANIFEST = 'manifest.json';

export const flashTools = {
  mkfsVfat: { candidates: ['/sbin/mkfs.vfat', '/usr/sbin/mkfs.vfat', 'mkfs.vfat'], debianPackage: 'dosfstools' },
  mcopy: { candidates: ['mcopy'], debianPackage: 'mtools' },
  mtype: { candidates: ['mtype'], debianPackage: 'mtools' },
  aptGet: { candidates: ['apt-get'], debianPackage: 'apt' },
  aptCache: { candidates: ['apt-cache'], debianPackage: 'apt' },
  dpkgDeb: { candidates: ['dpkg-deb'], debianPackage: 'dpkg' },
} as const satisfies Record<string, ToolSpec>;

const SPAN = { rootfs: [0, 60], payload: [60, 75], assemble: [75, 85], sdcard: [85, 100] } as const;

export function buildFlashImage(o: FlashImageOptions): Promise<FlashImageResult> {
  return withImageBuild(SPAN, o.progress, (report, started) => build(o, started, report));
}

async function build(o: FlashImageOptions, started: number, report: ReportProgress): Promise<FlashImageResult> {
  for (const tool of Object.values(flashTools)) needTool(tool);
  needTool(qemuTools.mke2fs);
  const repoRoot = resolve(o.repoRoot);
  const source = requirePayloadSource(repoRoot, NODE_PACKAGE);
  const out = resolve(o.out ?? `fleetlab-${o.board}.img`);
  if (!existsSync(dirname(out))) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--out ${out}: the directory ${dirname(out)} does not exist`);
  const suite = o.suite ?? DEFAULT_SUITE;
  const mirror = o.mirror ?? DEFAULT_MIRROR;
  const cacheDir = join(cacheRoot(), 'qemu');
  const flashDir = join(cacheRoot(), 'flash');
  mkdirSync(cacheDir, { recursive: true });
  mkdirSync(flashDir, { recursive: true });
  // Under the build lock no other build is running: any work directory here is a killed build's.
  for (const d of readdirSync(flashDir).filter((d) => /\.tmp-\d+$/.test(d))) rmSync(join(flashDir, d), { recursive: true, force: true });

  const { rootfs, rootfsKey } = await ensureRootfs({ cacheDir, suite, mirror, force: o.force, report: (f, d) => report('rootfs', f, d) });
  const kernel = bootFiles(rootfs);
  report('payload', 0, `Raspberry Pi firmware: Debian's raspi-firmware for ${suite} (non-free-firmware), with the host's apt`);
  const firmware = await fetchRaspiFirmware(join(cacheDir, 'downloads'), suite, mirror);

  const stage = join(flashDir, `stage.tmp-${process.pid}`);
  const work = join(flashDir, `work.tmp-${process.pid}`);
  rmSync(stage, { recursive: true, force: true });
  try {
    const staged = await stageSupervisor({ repoRoot, source, cacheDir, stage, report: (f, d) => report('payload', 0.2 + f * 0.8, d) });
    writeImageFiles(stage, flashRootFiles(o.board));
    const version = fleetlabVersion(import.meta.url);
    const bootText = { 'config.txt': configTxt(o.board, version), 'cmdline.txt': cmdlineTxt(o.board), [PROVISION_FILE]: provisionTemplate(o.board) };

    const h = createHash('sha256').update(`${FLASH_RECIPE_VERSION}\0${rootfsKey}\0${o.board}\0${firmware.version}\0${JSON.stringify(bootText)}\0${JSON.stringify([FLASH_ENABLED_UNITS, DISABLED_UNITS])}\0`);
    hashTree(h, stage, '');
    const key = h.digest('hex').slice(0, 16);
    const dir = join(flashDir, `${o.board}-${key}`);
    const cachedImage = join(dir, `fleetlab-${o.board}.img`);
    let built = false;
    if (o.force || !existsSync(join(dir, MANIFEST))) {
      rmSync(work, { recursive: true, force: true });
      mkdirSync(work, { recursive: true });
      const tree = join(work, 'rootfs');
      report('assemble', 0, `copying rootfs-${rootfsKey} and adding the supervisor`);
      await assembleTree({ rootfs, stage, tree, enabledUnits: FLASH_ENABLED_UNITS, disabledUnits: DISABLED_UNITS.filter((u) => !(FLASH_KEEPS_ENABLED as readonly string[]).includes(u)) });
      // Every flashed board makes its own SSH host keys at first boot (device-image/first-boot.ts), and its own machine id.
      for (const f of readdirSync(join(tree, 'etc/ssh')).filter((f) => f.startsWith('ssh_host_'))) rmSync(join(tree, 'etc/ssh', f));
      writeFileSync(join(tree, 'etc/machine-id'), '');
      for (const d of ['var/log/journal', 'boot/firmware', 'var/lib/fleetlab']) mkdirSync(join(tree, d), { recursive: true });

      report('assemble', 0.6, `boot partition: firmware ${firmware.version}, kernel ${kernel.kernelVersion}, ${FLASH_BOARDS[o.board].dtbs.length} device trees`);
      const boot = join(work, 'boot');
      mkdirSync(boot);
      for (const f of FLASH_BOARDS[o.board].firmware) cpSync(join(firmware.dir, f), join(boot, f));
      cpSync(firmware.licence, join(boot, 'LICENCE.raspi-firmware'));
      const dtbDir = join(rootfs, 'usr/lib', `linux-image-${kernel.kernelVersion}`, 'broadcom');
      for (const f of FLASH_BOARDS[o.board].dtbs) cpSync(join(dtbDir, f), join(boot, f));
      cpSync(kernel.kernel, join(boot, BOOT_KERNEL));
      cpSync(kernel.initrd, join(boot, BOOT_INITRD));
      for (const [name, text] of Object.entries(bootText)) writeFileSync(join(boot, name), text);

      const treeBytes = Number((await execa('du', ['-s', '--block-size=1', tree])).stdout.split('\t')[0]);
      // ext4's metadata and journal, and room to boot before the first boot grows it to the card.
      const layout = cardLayout(BOOT_PARTITION_BYTES, Math.ceil(treeBytes * 1.2) + 512 * 1024 ** 2);
      report('sdcard', 0, `${(layout.totalBytes / 1024 ** 3).toFixed(2)} GiB image: FAT32 ${BOOT_LABEL} ${layout.boot.sectors * SECTOR / 1024 ** 2} MiB, ext4 ${ROOT_LABEL} ${Math.round(layout.root.sectors * SECTOR / 1024 ** 2)} MiB`);
      const img = join(work, basename(cachedImage));
      await writeCard(img, layout, boot, tree, key);
      rmSync(tree, { recursive: true, force: true });
      const manifest: FlashImageManifest = { key, board: o.board, version, suite, kernelVersion: kernel.kernelVersion, node: staged.node, firmware: firmware.version, layout, builtAt: new Date().toISOString() };
      writeFileSync(join(work, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
      rmSync(join(work, 'boot'), { recursive: true, force: true });
      rmSync(dir, { recursive: true, force: true });
      renameSync(work, dir);
      pruneSiblings(flashDir, `${o.board}-`, dir, 1);
      built = true;
    } else report('sdcard', 1, `${o.board}-${key} cached`);

    const manifest = JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8')) as FlashImageManifest;
    report('done', 1, `writing ${out}`);
    await execa('cp', ['--sparse=always', '--reflink=auto', cachedImage, `${out}.tmp`]);
    renameSync(`${out}.tmp`, out);
    return { image: out, manifest, built, totalMs: Date.now() - started };
  } finally {
    rmSync(stage, { recursive: true, force: true });
    rmSync(work, { recursive: true, force: true });
    rmSync(`${out}.tmp`, { force: true });
  }
}

/** The partition table, then each filesystem written in place at its partition's offset. */
async function writeCard(img: string, layout: CardLayout, bootDir: string, tree: string, key: string): Promise<void> {
  writeFileSync(img, '');
  await execa('truncate', ['-s', String(layout.totalBytes), img]);
  const fd = openSync(img, 'r+');
  try {
    writeSync(fd, mbrBytes(Number.parseInt(key.slice(0, 8), 16), [layout.boot, layout.root]), 0, SECTOR, 0);
  } finally {
    closeSync(fd);
  }
  const run = async (argv: string[], what: string, env?: Record<string, string>) => {
    const r = await execa(argv[0]!, argv.slice(1), { reject: false, all: true, ...(env ? { env } : {}) });
    if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_INTERNAL', `${what} failed (exit ${r.exitCode}): ${r.all?.trim()}`);
  };
  const bootKiB = (layout.boot.sectors * SECTOR) / 1024;
  // 1 KiB clusters: with mkfs's default 4 KiB a 256 MiB FAT32 falls under its 65525-cluster floor and reads as FAT16.
  // -h: the hidden sectors before the partition, as a partitioning tool would record them.
  await run([needTool(flashTools.mkfsVfat), '-F', '32', '-s', '2', '-h', String(layout.boot.startSector), '-n', BOOT_LABEL, `--offset=${layout.boot.startSector}`, img, String(bootKiB)], 'mkfs.vfat');
  const files = readdirSync(bootDir).map((f) => join(bootDir, f));
  await run([needTool(flashTools.mcopy), '-s', '-i', `${img}@@${layout.boot.startSector * SECTOR}`, ...files, '::/'], 'mcopy onto the boot partition', { MTOOLS_SKIP_CHECK: '1' });
  const rootKiB = (layout.root.sectors * SECTOR) / 1024;
  await run([needTool(qemuTools.mke2fs), '-q', '-F', '-t', 'ext4', '-L', ROOT_LABEL, '-E', `offset=${layout.root.startSector * SECTOR}`, '-d', tree, img, `${rootKiB}k`], 'mke2fs -d onto the root partition');
}

/**
 * Debian's raspi-firmware package (architecture all, component non-free-firmware), fetched by
 * the host's apt against its own keyring into a private state directory: nothing of the
 * host's apt setup is read or changed. Cached per suite and package version.
 */
async function fetchRaspiFirmware(downloads: string, suite: string, mirror: string): Promise<{ dir: string; licence: string; version: string }> {
  const state = join(downloads, `apt-${suite}`);
  for (const d of ['lists/partial', 'archives/partial']) mkdirSync(join(state, d), { recursive: true });
  writeFileSync(join(state, 'sources.list'), `deb [arch=arm64] ${mirror} ${suite} non-free-firmware\n`);
  if (!existsSync(join(state, 'status'))) writeFileSync(join(state, 'status'), '');
  const apt = [
    '-o', `Dir::State=${state}`, '-o', `Dir::State::Lists=${join(state, 'lists')}`, '-o', `Dir::State::status=${join(state, 'status')}`,
    '-o', `Dir::Cache=${state}`, '-o', `Dir::Cache::archives=${join(state, 'archives')}`,
    '-o', `Dir::Etc::SourceList=${join(state, 'sources.list')}`, '-o', 'Dir::Etc::SourceParts=/nonexistent',
    '-o', 'APT::Architecture=arm64', '-o', 'APT::Architectures::=arm64', '-o', 'Debug::NoLocking=1', '-o', 'APT::Sandbox::User=root', '-q',
  ];
  const aptGet = needTool(flashTools.aptGet);
  const cached = readdirSync(downloads).filter((d) => d.startsWith(`raspi-firmware-${suite}-`) && existsSync(join(downloads, d, 'ok')));
  const update = await execa(aptGet, [...apt, 'update'], { reject: false, all: true });
  if (update.exitCode !== 0) {
    // Offline with a cached copy: use it; the image key names its version.
    if (cached[0]) return firmwareAt(join(downloads, cached[0]), cached[0].slice(`raspi-firmware-${suite}-`.length));
    throw new FleetlabError('SUP_ERR_HOST', `apt-get update for ${mirror} ${suite} non-free-firmware failed: ${update.all?.trim().split('\n').slice(-3).join(' ')}`);
  }
  const policy = await execa(needTool(flashTools.aptCache), [...apt, 'show', '--no-all-versions', 'raspi-firmware'], { reject: false, all: true });
  const version = /^Version: (.+)$/m.exec(policy.stdout)?.[1]?.trim();
  if (!version) throw new FleetlabError('SUP_ERR_HOST', `${mirror} ${suite} has no raspi-firmware package in non-free-firmware`);
  const dir = join(downloads, `raspi-firmware-${suite}-${version}`);
  if (existsSync(join(dir, 'ok'))) return firmwareAt(dir, version);
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const dl = await execa(aptGet, [...apt, 'download', `raspi-firmware=${version}`], { cwd: tmp, reject: false, all: true });
  const deb = readdirSync(tmp).find((f) => f.endsWith('.deb'));
  if (dl.exitCode !== 0 || !deb) throw new FleetlabError('SUP_ERR_HOST', `apt-get download raspi-firmware failed: ${dl.all?.trim()}`);
  await execa(needTool(flashTools.dpkgDeb), ['-x', join(tmp, deb), join(tmp, 'x')]);
  writeFileSync(join(tmp, 'ok'), '');
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return firmwareAt(dir, version);
}

function firmwareAt(dir: string, version: string): { dir: string; licence: string; version: string } {
  return { dir: join(dir, 'x/usr/lib/raspi-firmware'), licence: join(dir, 'x/usr/share/doc/raspi-firmware/copyright'), version };
}
