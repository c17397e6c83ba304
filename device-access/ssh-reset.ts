/**
 * The device reset between spec files over SSH, for a board the harness did not boot: what
 * the supervisor made goes (its containers, volumes and networks, found by its label; its
 * data dir, so a new uuid and key; its lock root), and the host config it may have changed
 * (hostname, proxy files, boot config) goes back to how this run first found the board. So
 * each spec file starts on a fresh device, as the sim, container and qemu targets give it.
 */
import { FleetlabError } from '../src/errors.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { shellQuote } from '../src/shell-quote.js';
import type { SshDevice } from './ssh-device.js';

export interface SupervisorPaths {
  readonly unit: string;
  readonly dataDir: string;
  readonly lockRoot: string;
  readonly proxyConfigDir: string;
}

export interface HostPaths {
  readonly hostname: string;
  readonly proxyConfigDir: string;
  readonly bootConfig: string;
}

/** The host config as the run first found it: restored by every reset. */
export interface HostBaseline {
  readonly hostname: string;
  /** Each file the supervisor may write, with its content then; undefined: it did not exist. */
  readonly files: ReadonlyMap<string, Buffer | undefined>;
}

function resetError(message: string): FleetlabError {
  return new FleetlabError('SUP_ERR_HOST', message);
}

/**
 * Shell lines that stop the supervisor's unit and remove what it made. Only what carries its
 * label goes: a lab board may run containers of its own. The proxy directory is emptied, not
 * removed (on a board it may be a mount).
 */
export function supervisorWipeLines(p: SupervisorPaths): string[] {
  const proxyDir = shellQuote([p.proxyConfigDir]);
  return [
    `systemctl stop ${shellQuote([p.unit])}`,
    ...supervisedObjectsWipeLines(),
    `rm -rf -- ${shellQuote([p.dataDir, p.lockRoot])}`,
    `if [ -d ${proxyDir} ]; then find ${proxyDir} -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +; fi`,
  ];
}

/** Shell lines that remove the containers, volumes and networks carrying the supervisor's label (and nothing else). */
export function supervisedObjectsWipeLines(): string[] {
  const label = shellQuote([`label=${LABEL.supervised}`]);
  return [
    `docker ps -aq --filter ${label} | xargs -r docker rm -f >/dev/null`,
    `docker volume ls -q --filter ${label} | xargs -r docker volume rm -f >/dev/null`,
    `docker network ls -q --filter ${label} | xargs -r docker network rm >/dev/null`,
  ];
}

async function readIfPresent(ssh: SshDevice, path: string): Promise<Buffer | undefined> {
  return (await ssh.files.exists(path)) ? ssh.files.read(path) : undefined;
}

/** Reads the hostname, the boot config and the proxy directory's files as they are now. */
export async function readHostBaseline(ssh: SshDevice, paths: HostPaths): Promise<HostBaseline> {
  const files = new Map<string, Buffer | undefined>();
  files.set(paths.bootConfig, await readIfPresent(ssh, paths.bootConfig));
  if (await ssh.files.exists(paths.proxyConfigDir)) {
    for (const name of await ssh.files.list(paths.proxyConfigDir)) {
      const path = `${paths.proxyConfigDir}/${name}`;
      files.set(path, await ssh.files.read(path));
    }
  }
  const hostname = ((await readIfPresent(ssh, paths.hostname))?.toString('utf8') ?? (await ssh.run(['hostname'])).stdout).trim();
  if (!hostname) throw resetError(`cannot tell the board's hostname (${paths.hostname} is empty or missing, and so is \`hostname\`) on ${ssh.where}`);
  return { hostname, files };
}

/** Puts the baseline's files back: each written as it was, or removed where there was none. */
export async function restoreHostFiles(ssh: SshDevice, baseline: HostBaseline): Promise<void> {
  for (const [path, content] of baseline.files) {
    if (content === undefined) await ssh.files.remove(path);
    else await ssh.files.write(path, content);
  }
}

export interface BoardResetOptions {
  readonly supervisor: SupervisorPaths;
  readonly baseline: HostBaseline;
  /** For the wipe (container removal is slow on a slow board). */
  readonly timeoutMs: number;
}

/**
 * Stops the supervisor, wipes what it made, restores the host config and starts it again.
 * Resolves once the unit is started; the caller waits for the API.
 */
/** Runs one step of a reset as `sh -c script` (args as $1...); rejects naming the step when it fails. */
export async function runResetStep(ssh: SshDevice, what: string, script: string, args: readonly string[], timeoutMs: number): Promise<void> {
  const r = await ssh.run(['sh', '-c', script, `fleetlab-${what.replace(/\s+/g, '-')}`, ...args], { timeoutMs });
  if (r.exitCode !== 0) throw resetError(`resetting the board on ${ssh.where}: ${what} failed (exit ${r.exitCode}): ${r.stderr.trim() || r.stdout.trim() || 'no output'}`);
}

export async function resetBoard(ssh: SshDevice, options: BoardResetOptions): Promise<void> {
  const { supervisor, baseline, timeoutMs } = options;
  const run = (what: string, script: string, args: readonly string[] = []) => runResetStep(ssh, what, script, args, timeoutMs);
  await run('wipe', ['set -eu', ...supervisorWipeLines(supervisor)].join('\n'));
  await restoreHostFiles(ssh, baseline);
  // The proxy unit reads the restored files only when (re)started; a board without it is fine.
  await run('host config', 'set -eu\nhostnamectl set-hostname "$1"\nsystemctl try-restart redsocks.service 2>/dev/null || true', [baseline.hostname]);
  await run('start', 'systemctl start "$1"', [supervisor.unit]);
}
