/**
 * The Debian arm64 root filesystem: mmdebstrap with a qemu-user second stage (binfmt_misc
 * runs the arm64 maintainer scripts), kernel and initramfs included. The slow layer, cached
 * by ./recipe.ts `rootfsKey`.
 */
import { existsSync, readdirSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { FleetlabError } from '../src/errors.js';
import { needTool, qemuTools, requireArm64Binfmt } from './tools.js';
import { INITRAMFS_MODULES, RASPI3B_DTB, TRIM_PATHS, packagesFor } from './recipe.js';

/** mmdebstrap's phases in the order it prints them, for a percentage of the stage. */
const PHASES = [
  'running apt-get update',
  'downloading packages',
  'extracting archives',
  'installing essential packages',
  'installing remaining packages',
  'cleaning package lists',
] as const;

export interface StageReport {
  (fraction: number, detail: string): void;
}

/** The `mmdebstrap` argv: the initramfs is told to carry only the listed modules before the kernel installs. */
export function mmdebstrapArgs(o: { suite: string; mirror: string; target: string }): string[] {
  const conf = join('$1', 'etc/initramfs-tools');
  const setupHook = [
    `mkdir -p "${conf}/conf.d"`,
    `printf 'MODULES=list\\n' > "${conf}/conf.d/fleetlab.conf"`,
    `printf '%s\\n' ${INITRAMFS_MODULES.join(' ')} > "${conf}/modules"`,
  ].join(' && ');
  return [
    '--arch=arm64',
    '--variant=minbase',
    '--mode=root',
    `--include=${packagesFor(o.suite).join(',')}`,
    // Documentation and translations are never unpacked (copyright files stay).
    '--dpkgopt=path-exclude=/usr/share/man/*',
    '--dpkgopt=path-exclude=/usr/share/locale/*',
    '--dpkgopt=path-exclude=/usr/share/doc/*',
    '--dpkgopt=path-include=/usr/share/doc/*/copyright',
    `--setup-hook=${setupHook}`,
    o.suite,
    o.target,
    o.mirror,
  ];
}

/** The kernel, initramfs and device tree as the kernel package installed them. */
export function bootFiles(rootfs: string): { kernel: string; initrd: string; dtb: string; kernelVersion: string } {
  const boot = join(rootfs, 'boot');
  const kernels = existsSync(boot) ? readdirSync(boot).filter((f) => f.startsWith('vmlinuz-')).sort() : [];
  const version = kernels.at(-1)?.slice('vmlinuz-'.length);
  if (!version) throw new FleetlabError('SUP_ERR_INTERNAL', `no kernel in ${boot}: linux-image-arm64 did not install`);
  const files = {
    kernel: join(boot, `vmlinuz-${version}`),
    initrd: join(boot, `initrd.img-${version}`),
    dtb: join(rootfs, 'usr/lib', `linux-image-${version}`, RASPI3B_DTB),
    kernelVersion: version,
  };
  for (const f of [files.initrd, files.dtb]) if (!existsSync(f)) throw new FleetlabError('SUP_ERR_INTERNAL', `${f} is missing after the root filesystem build`);
  return files;
}

export async function buildRootfs(o: { target: string; suite: string; mirror: string; report: StageReport }): Promise<void> {
  const mmdebstrap = needTool(qemuTools.mmdebstrap);
  requireArm64Binfmt();
  if (process.getuid?.() !== 0) {
    throw new FleetlabError('SUP_ERR_INTERNAL', 'building the root filesystem runs mmdebstrap --mode=root, which needs root; run `fleetlab qemu build` as root once, later runs reuse the cache');
  }
  o.report(0, `mmdebstrap ${o.suite} arm64 from ${o.mirror}: ${packagesFor(o.suite).length} packages`);
  const run = execa(mmdebstrap, mmdebstrapArgs(o), { all: true, reject: false });
  let tail: string[] = [];
  let phase = -1;
  run.all?.on('data', (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (!line.trim()) continue;
      tail = [...tail.slice(-29), line];
      const next = PHASES.findIndex((p) => line.includes(p));
      if (next > phase) {
        phase = next;
        o.report(next / PHASES.length, line.replace(/^I: /, ''));
      }
    }
  });
  const result = await run;
  if (result.exitCode !== 0) {
    throw new FleetlabError('SUP_ERR_INTERNAL', `mmdebstrap failed (exit ${result.exitCode}); its last lines:\n${tail.join('\n')}`);
  }
  for (const p of TRIM_PATHS) await rm(join(o.target, p), { recursive: true, force: true });
  bootFiles(o.target);
  o.report(1, 'root filesystem ready');
}
