/**
 * Runs a process with a simulated sysfs tree (./sysfs-gpio.ts) at /sys/class, in a private
 * mount namespace so the rest of the machine keeps the real /sys/class. This is how the
 * supervisor of a simulated device reaches the simulated GPIO with its production adapter:
 * onoff hard-codes /sys/class/gpio.
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { lstatSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { FleetlabError } from '../../src/errors.js';
import { requireTool, tools } from '../../src/tools.js';

export interface NamespaceCommand {
  file: string;
  args: string[];
}

export interface GpioNamespaceOptions {
  /** The real class directory; default `/sys/class`. */
  realClassDir?: string;
  /** Whether to skip the user namespace; default: running as root. */
  root?: boolean;
}

/*
 * Paths arrive as positional parameters only, never inside the script text. Layout:
 *   $1 mount  $2 class dir  $3 target  $4 n  then n (source, placeholder) pairs, then the command.
 * unshare and sh both exec, so the command keeps the PID the caller spawned.
 */
const script = [
  'm=$1; c=$2; t=$3; n=$4; shift 4',
  'while [ "$n" -gt 0 ]; do',
  '  "$m" --bind -- "$1" "$2" || { echo "fleetlab gpio namespace: cannot bind $1" >&2; exit 125; }',
  '  shift 2; n=$((n - 1))',
  'done',
  // rbind carries the placeholder binds made just above along with the tree.
  '"$m" --rbind -- "$c" "$t" || { echo "fleetlab gpio namespace: cannot bind $c over $t" >&2; exit 125; }',
  'exec "$@"',
].join('\n');

/**
 * Command line (for execa/spawn, no shell) that runs `command` with `classDir` bind-mounted
 * over /sys/class in a new private mount namespace; adds a user namespace mapping the caller
 * to root when not running as root.
 */
export function gpioNamespaceCommand(classDir: string, command: string[], options: GpioNamespaceOptions = {}): NamespaceCommand {
  if (command.length === 0) {
    throw new FleetlabError('SUP_ERR_INTERNAL', 'gpioNamespaceCommand needs a command to run');
  }
  const unshare = requireTool(tools.unshare);
  const mount = requireTool(tools.mount);
  const realClassDir = options.realClassDir ?? '/sys/class';
  const root = options.root ?? process.getuid?.() === 0;
  const dir = resolve(classDir);
  const pairs = passthroughEntries(realClassDir, dir);
  return {
    file: unshare,
    args: [
      '--mount',
      '--propagation',
      'private',
      ...(root ? [] : ['--user', '--map-root-user']),
      '--',
      '/bin/sh',
      '-c',
      script,
      'fleetlab-gpio-ns',
      mount,
      dir,
      realClassDir,
      String(pairs.length),
      ...pairs.flat(),
      ...command,
    ],
  };
}

/**
 * As a user other than root the namespace comes with a user namespace, which some machines
 * refuse to unprivileged users (Ubuntu 24.04's AppArmor restriction, as on GitHub's runners;
 * Debian's older sysctl). Tried before the supervisor starts, so a refusal is one sentence with
 * the way out instead of a supervisor that exits during its start.
 */
export function requireUserNamespace(options: Pick<GpioNamespaceOptions, 'root'> = {}): void {
  if (options.root ?? process.getuid?.() === 0) return;
  // A bind mount too, not only the namespaces: AppArmor's restriction may let unshare through
  // and deny what the tree needs inside. Of a new empty directory: in a user namespace the
  // kernel refuses to bind a directory with mounts below it (EINVAL, "wrong fs type"), as /tmp
  // has while a root build elsewhere on the machine has its chroot's /proc mounted there.
  const probe = mkdtempSync(join(tmpdir(), 'fleetlab-userns-'));
  let tried: SpawnSyncReturns<string>;
  try {
    tried = spawnSync(requireTool(tools.unshare), ['--user', '--map-root-user', '--mount', '--propagation', 'private', '--', requireTool(tools.mount), '--bind', probe, probe], { encoding: 'utf8' });
  } finally {
    rmSync(probe, { recursive: true, force: true });
  }
  if (tried.status === 0) return;
  const why = (tried.stderr || tried.error?.message || `exit ${tried.status}`).trim();
  throw new FleetlabError(
    'HIL_ERR_PERMISSION',
    `the sim target keeps its simulated GPIO in a private mount namespace, which for a user other than root (uid ${process.getuid?.()}) needs an unprivileged user namespace, and this machine refuses one (${why}): allow them (sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04 and GitHub's runners, kernel.unprivileged_userns_clone=1 on older Debian), run as root, or use --target container`,
  );
}

/**
 * (real entry, placeholder) pairs for the entries of the mirrored classes that are not
 * symlinks: they exist only at their /sys/class path, so the real one is bound over the
 * placeholder before the tree covers /sys/class.
 */
function passthroughEntries(realClassDir: string, classDir: string): [string, string][] {
  const pairs: [string, string][] = [];
  let classes: string[];
  try {
    classes = readdirSync(classDir);
  } catch (err) {
    throw new FleetlabError('SUP_ERR_INTERNAL', `simulated sysfs class directory ${classDir} is not readable`, { cause: err });
  }
  for (const cls of classes) {
    if (cls === 'gpio') continue;
    let entries: string[];
    try {
      entries = readdirSync(join(classDir, cls));
    } catch {
      continue;
    }
    for (const entry of entries) {
      const placeholder = join(classDir, cls, entry);
      const real = join(realClassDir, cls, entry);
      if (lstatSync(placeholder).isSymbolicLink() || !exists(real)) continue;
      pairs.push([real, placeholder]);
    }
  }
  return pairs;
}

function exists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}
