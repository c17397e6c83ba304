/**
 * The system tools building and booting the emulated board needs, each with the Debian
 * package that ships it (scripts/provision installs them all), and where images are cached.
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { FleetlabError } from '../src/errors.js';
import { findTool, missingToolError, tools, type ToolSpec } from '../src/tools.js';

export const qemuTools = {
  mmdebstrap: tools.mmdebstrap,
  mke2fs: { candidates: ['/sbin/mke2fs', '/usr/sbin/mke2fs', 'mke2fs'], debianPackage: 'e2fsprogs' },
  qemuImg: { candidates: ['qemu-img'], debianPackage: 'qemu-utils' },
  qemuSystem: { candidates: ['qemu-system-aarch64'], debianPackage: 'qemu-system-arm' },
  crossCxx: { candidates: ['aarch64-linux-gnu-g++'], debianPackage: 'g++-aarch64-linux-gnu' },
  tar: { candidates: ['tar'], debianPackage: 'tar' },
  xz: { candidates: ['xz'], debianPackage: 'xz-utils' },
} as const satisfies Record<string, ToolSpec>;

/** Absolute path of the tool (sbin dirs included: root's tools are not always on PATH). */
export function needTool(spec: ToolSpec): string {
  const found = findTool(spec, `${process.env.PATH ?? ''}:/usr/sbin:/sbin`);
  if (!found) throw missingToolError(spec);
  return found;
}

/** A foreign-architecture chroot runs arm64 binaries through qemu-user, registered with binfmt_misc. */
export function requireArm64Binfmt(binfmtDir = '/proc/sys/fs/binfmt_misc'): void {
  if (existsSync(join(binfmtDir, 'qemu-aarch64'))) return;
  throw new FleetlabError(
    'SUP_ERR_TOOL_MISSING',
    `arm64 binaries cannot run here: ${binfmtDir}/qemu-aarch64 is not registered. Install the Debian packages "qemu-user-static" and "binfmt-support" (apt-get install qemu-user-static binfmt-support), or run scripts/provision`,
  );
}

/** `$FLEETLAB_CACHE_DIR`, else `$XDG_CACHE_HOME/fleetlab`, else `~/.cache/fleetlab`: outside any checkout. */
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  if (env.FLEETLAB_CACHE_DIR) return env.FLEETLAB_CACHE_DIR;
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'fleetlab');
}
