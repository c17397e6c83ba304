/**
 * System tools fleetlab runs (journalctl, dbus-daemon, ...). A missing one must fail with a
 * message that says what to install, never with a bare ENOENT.
 */
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { FleetlabError } from './errors.js';

export interface ToolSpec {
  /** Program name looked up on PATH, or candidate absolute paths tried in order. */
  candidates: string[];
  /** Debian package that ships it. */
  debianPackage: string;
}

export const tools = {
  journalctl: { candidates: ['journalctl'], debianPackage: 'systemd' },
  dbusDaemon: { candidates: ['dbus-daemon'], debianPackage: 'dbus' },
  journalRemote: {
    candidates: ['/lib/systemd/systemd-journal-remote', '/usr/lib/systemd/systemd-journal-remote', 'systemd-journal-remote'],
    debianPackage: 'systemd-journal-remote',
  },
  unshare: { candidates: ['unshare'], debianPackage: 'util-linux' },
  mount: { candidates: ['mount'], debianPackage: 'mount' },
  umount: { candidates: ['umount'], debianPackage: 'mount' },
  setpriv: { candidates: ['setpriv'], debianPackage: 'util-linux' },
  busybox: { candidates: ['/bin/busybox', '/usr/bin/busybox'], debianPackage: 'busybox-static' },
  mmdebstrap: { candidates: ['mmdebstrap'], debianPackage: 'mmdebstrap' },
} as const satisfies Record<string, ToolSpec>;

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Absolute path of the tool, or undefined when it is not installed. */
export function findTool(spec: ToolSpec, pathEnv = process.env.PATH ?? ''): string | undefined {
  for (const candidate of spec.candidates) {
    if (candidate.includes('/')) {
      if (isExecutable(candidate)) return candidate;
      continue;
    }
    for (const dir of pathEnv.split(delimiter).filter(Boolean)) {
      const full = join(dir, candidate);
      if (isExecutable(full)) return full;
    }
  }
  return undefined;
}

export function missingToolError(spec: ToolSpec): FleetlabError {
  const name = spec.candidates[spec.candidates.length - 1]!;
  return new FleetlabError(
    'SUP_ERR_TOOL_MISSING',
    `${name} is not installed: install the Debian package "${spec.debianPackage}" (apt-get install ${spec.debianPackage}), or run scripts/provision`,
  );
}

/** Absolute path of the tool; throws a FleetlabError naming the package to install. */
export function requireTool(spec: ToolSpec): string {
  const found = findTool(spec);
  if (!found) throw missingToolError(spec);
  return found;
}
