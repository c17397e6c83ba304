/**
 * The emulated boards' initramfs: busybox, the few kernel modules that mount the root
 * filesystem, and a /init that loads them, waits for the root device, mounts it and hands over
 * to systemd. Debian's initramfs-tools image does the same job through udev (start, trigger,
 * settle) and took 6-7 s of every boot under TCG; this one takes about one. The root
 * filesystem keeps Debian's own initramfs for a card image (`fleetlab card build`).
 *
 * Pure planning here (which modules in which order, the script, the cpio archive); the
 * build (./build.ts) reads the files and writes the result.
 */
import { execa } from 'execa';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FleetlabError } from '../src/errors.js';
import { needTool, qemuTools } from './tools.js';

/**
 * What mounts the root filesystem on either machine: virtio over MMIO (virt), the sdhost and
 * Arasan SD controllers (raspi3b; mmc_block is built into Debian's kernel), and ext4 with the
 * crc32c its metadata checksums need (a module the kernel would otherwise ask modprobe for).
 * A name the kernel has built in is skipped.
 */
export const ROOT_MODULES = ['virtio_mmio', 'virtio_blk', 'bcm2835', 'sdhci_iproc', 'crc32c_generic', 'ext4'] as const;

/** Bump when the script or the archive's layout changes: it is part of the image key. */
export const INITRAMFS_VERSION = 'initramfs/1';

/**
 * The module files to load, dependencies first, from the kernel's modules.dep (`path: dep
 * dep...`, each dependency's own dependencies listed after it, so they load in reverse).
 * Names are matched as the kernel does, with `-` and `_` alike.
 */
export function moduleLoadOrder(modulesDep: string, wanted: readonly string[]): string[] {
  const deps = new Map<string, string[]>();
  const byName = new Map<string, string>();
  for (const line of modulesDep.split('\n')) {
    const [path, rest] = line.split(':');
    if (!path || rest === undefined) continue;
    deps.set(path, rest.trim() === '' ? [] : rest.trim().split(/\s+/));
    byName.set(moduleName(path), path);
  }
  const order: string[] = [];
  const visit = (path: string) => {
    if (order.includes(path)) return;
    for (const dep of [...(deps.get(path) ?? [])].reverse()) visit(dep);
    order.push(path);
  };
  for (const name of wanted) {
    const path = byName.get(name.replace(/-/g, '_'));
    if (path) visit(path);
  }
  return order;
}

/** `kernel/fs/ext4/ext4.ko.xz` -> `ext4`. */
export function moduleName(path: string): string {
  return (path.split('/').pop() ?? '').replace(/\.ko(\.[a-z]+)?$/, '').replace(/-/g, '_');
}

/** Where a module sits in the archive: uncompressed, since busybox insmod reads plain ELF. */
export function archivedModule(path: string): string {
  return `lib/modules/${moduleName(path)}.ko`;
}

/**
 * /init: mount what insmod and the root device need, load the modules in order, wait up to
 * 30 s for the `root=` device, a device path as the boards are given (an SD card probes late;
 * LABEL= and PARTUUID= are not resolved: a card image boots its own initramfs), mount it as the command line
 * says (rw/ro, rootfstype), move /dev over and switch to /sbin/init. On failure it says why
 * on the console and leaves a shell there, as Debian's initramfs does.
 */
export function initScript(modules: readonly string[]): string {
  return `#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in ${modules.map(archivedModule).join(' ')}; do
  insmod "/$m" || echo "fleetlab initramfs: insmod $m failed"
done
root= mode=rw fstype=ext4 init=/sbin/init
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    root=*) root="\${arg#root=}" ;;
    rootfstype=*) fstype="\${arg#rootfstype=}" ;;
    init=*) init="\${arg#init=}" ;;
    rw) mode=rw ;;
    ro) mode=ro ;;
  esac
done
tries=0
while [ ! -b "$root" ] && [ $tries -lt 600 ]; do sleep 0.05; tries=$((tries + 1)); done
if ! mount -t "$fstype" -o "$mode" "$root" /root; then
  echo "fleetlab initramfs: cannot mount root=$root ($fstype, $mode); a shell follows"
  exec sh
fi
umount /proc /sys
mount --move /dev /root/dev
exec switch_root /root "$init"
`;
}

export interface CpioEntry {
  readonly path: string;
  /** File type and permission bits, as st_mode. */
  readonly mode: number;
  readonly data?: Buffer;
}

export const S_IFDIR = 0o040000;
export const S_IFREG = 0o100000;

/** A cpio archive in the "newc" format the kernel unpacks an initramfs from (no compression: faster to unpack under TCG). */
export function cpioNewc(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  const pad = (n: number) => Buffer.alloc((4 - (n % 4)) % 4);
  let ino = 1;
  const push = (path: string, mode: number, data: Buffer) => {
    const name = Buffer.from(`${path}\0`);
    const fields = [ino++, mode, 0, 0, 1, 0, data.length, 0, 0, 0, 0, name.length, 0];
    const header = Buffer.from(`070701${fields.map((f) => f.toString(16).padStart(8, '0')).join('')}`);
    parts.push(header, name, pad(header.length + name.length), data, pad(data.length));
  };
  for (const e of entries) push(e.path, e.mode, e.data ?? Buffer.alloc(0));
  push('TRAILER!!!', 0, Buffer.alloc(0));
  return Buffer.concat(parts);
}

/** The entries of the archive: the directories, busybox, the modules (uncompressed), /init. */
export function initramfsEntries(o: { busybox: Buffer; modules: ReadonlyArray<{ path: string; data: Buffer }> }): CpioEntry[] {
  return [
    ...['bin', 'dev', 'lib', 'lib/modules', 'proc', 'root', 'sys'].map((path) => ({ path, mode: S_IFDIR | 0o755 })),
    { path: 'bin/busybox', mode: S_IFREG | 0o755, data: o.busybox },
    ...o.modules.map((m) => ({ path: archivedModule(m.path), mode: S_IFREG | 0o644, data: m.data })),
    { path: 'init', mode: S_IFREG | 0o755, data: Buffer.from(initScript(o.modules.map((m) => m.path))) },
  ];
}

/** Reads the rootfs's busybox and modules (xz-compressed in Debian's kernel package) and returns the archive. */
export async function buildInitramfs(o: { rootfs: string; kernelVersion: string }): Promise<Buffer> {
  const moduleDir = join(o.rootfs, 'lib/modules', o.kernelVersion);
  const order = moduleLoadOrder(readFileSync(join(moduleDir, 'modules.dep'), 'utf8'), ROOT_MODULES);
  if (!order.some((p) => moduleName(p) === 'ext4')) {
    throw new FleetlabError('SUP_ERR_INTERNAL', `initramfs: ext4 is not a module of kernel ${o.kernelVersion} (${moduleDir}/modules.dep)`);
  }
  const xz = needTool(qemuTools.xz);
  const modules = [];
  for (const path of order) {
    const file = join(moduleDir, path);
    const data = path.endsWith('.xz') ? (await execa(xz, ['-dc', file], { encoding: 'buffer' })).stdout : readFileSync(file);
    modules.push({ path, data: Buffer.from(data) });
  }
  return cpioNewc(initramfsEntries({ busybox: readFileSync(join(o.rootfs, 'bin/busybox')), modules }));
}
