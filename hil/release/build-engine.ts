/**
 * A private dockerd that builds a release for a board's architecture (arm64) on this host.
 * Debian's docker.io 20.10 keeps one image per tag, so the arm64 `fleetlab/busybox:latest` a
 * team's Dockerfile names cannot live beside the host engine's amd64 one: the build engine has
 * its own data root, exec root, socket, containerd and bridge, and no iptables rules; its RUN
 * steps execute through qemu-user (binfmt_misc). What it builds goes to the device through a
 * registry (./registry.ts), never through this engine.
 *
 * Its bridge is one it makes for itself: dockerd started with `--bridge=none` deletes the
 * host's `docker0` at start (the host engine's containers then fail to start), and without
 * `--bridge` it would share `docker0` with the host engine.
 *
 * Its directory lives under the system's temp dir with an owner file: a run killed with -9
 * leaves it behind, and the next start stops that dockerd and removes it.
 */
import { existsSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { FleetlabError, errorText } from '../../src/errors.js';
import { findTool, missingToolError, tools, type ToolSpec } from '../../src/tools.js';
import { ensureBaseImage } from '../../sim/images/base-image.js';
import { engineAt } from '../../src/engine-client/engine-at.js';
import { cacheRoot, needTool, qemuTools, requireArm64Binfmt } from '../../device-image/tools.js';
import { DEFAULT_MIRROR, DEFAULT_SUITE } from '../../device-image/recipe.js';
import { until } from '../../src/wait.js';
import { reapStale, spawnOwned } from '../../src/owned-dirs.js';
import { stopPid, stopProcesses } from '../../src/processes.js';

export const dockerdTool: ToolSpec = { candidates: ['/usr/sbin/dockerd', '/usr/bin/dockerd', 'dockerd'], debianPackage: 'docker.io' };
const ipTool: ToolSpec = { candidates: ['/usr/sbin/ip', '/sbin/ip', '/usr/bin/ip', '/bin/ip', 'ip'], debianPackage: 'iproute2' };
const DIR_PREFIX = 'fleetlab-build-engine-';
const READY_MS = 60_000;

export interface BuildEngine {
  /** Engine API socket of the private dockerd. */
  readonly socketPath: string;
  /** The image config's name for what it builds. */
  readonly architecture: 'arm64';
  close(): Promise<void>;
}

/** Runs `ip` with argv; false when it failed (a bridge already gone). */
async function ip(argv: readonly string[]): Promise<boolean> {
  const binary = findTool(ipTool);
  if (!binary) throw missingToolError(ipTool);
  return (await execa(binary, argv, { reject: false })).exitCode === 0;
}

/**
 * Unmounts what is mounted under `dir`, deepest first: dockerd's bind mount of its data root and
 * its containers' layers, which it undoes when it stops but not when it is killed with -9 (the
 * directory cannot be removed while they stay). /proc/self/mountinfo escapes spaces as \040.
 */
async function unmountUnder(dir: string): Promise<void> {
  const umount = findTool(tools.umount);
  const info = await readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  const points = info
    .split('\n')
    .map((line) => (line.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))))
    .filter((point) => point === dir || point.startsWith(`${dir}/`));
  if (!umount) return;
  for (const point of [...new Set(points)].sort((a, b) => b.length - a.length)) await execa(umount, [point], { reject: false });
}

/** Live processes (other than this one) whose /proc/<pid>/<file> holds any of `needles`. */
function processesWith(file: 'cmdline' | 'cgroup', needles: readonly string[]): number[] {
  const holds = (pid: number) => {
    try {
      const text = readFileSync(`/proc/${pid}/${file}`, 'latin1');
      return needles.some((needle) => text.includes(needle));
    } catch {
      return false; // gone meanwhile
    }
  };
  return needles.length === 0 ? [] : readdirSync('/proc').map(Number).filter((pid) => Number.isInteger(pid) && pid !== process.pid && holds(pid));
}

/**
 * What of an engine outlives its dockerd killed with -9: the containers of a build that was
 * running (in cgroups named by their ids, which its data root lists) and their containerd
 * shims (started in sessions of their own, outside the run's process group, and naming the
 * engine's directory in their command lines). The containers are killed (a container's first
 * process ignores SIGTERM) and left to their shims to reap, then the shims stopped: a shim
 * stopped first would hand its dead children to init, which on a CI runner may never reap them.
 */
async function stopEngineLeftovers(dir: string): Promise<void> {
  const ids = existsSync(join(dir, 'data', 'containers')) ? readdirSync(join(dir, 'data', 'containers')) : [];
  await stopProcesses(processesWith('cgroup', ids.map((id) => `/${id}`)), 0, (pid) => !existsSync(`/proc/${pid}`));
  await stopProcesses(processesWith('cmdline', [dir]));
}

/** Stops the engines, their builds' containers and shims, and removes the directories, mounts and bridges, that runs killed before their close left behind. */
export function reapStaleBuildEngines(root = tmpdir()): Promise<string[]> {
  return reapStale(root, DIR_PREFIX, async (owner, dir) => {
    await stopEngineLeftovers(dir);
    await unmountUnder(dir);
    if (owner.bridge) await ip(['link', 'del', owner.bridge]);
  });
}

/**
 * Debian's static busybox for arm64, what a board's test images are made of: extracted from the package
 * by mmdebstrap (a few seconds), cached per suite under `<cache>/arm64/`.
 */
export async function arm64Busybox(o: { cacheDir?: string; suite?: string; mirror?: string } = {}): Promise<string> {
  const suite = o.suite ?? DEFAULT_SUITE;
  const dir = join(o.cacheDir ?? cacheRoot(), 'arm64');
  const path = join(dir, `busybox-${suite}`);
  if (existsSync(path)) return path;
  const mmdebstrap = needTool(qemuTools.mmdebstrap);
  await mkdir(dir, { recursive: true });
  const work = await mkdtemp(join(dir, 'extract-'));
  try {
    const tarPath = join(work, 'busybox-static.tar');
    const r = await execa(mmdebstrap, ['--variant=extract', '--include=busybox-static', '--architectures=arm64', suite, tarPath, o.mirror ?? DEFAULT_MIRROR], { all: true, reject: false });
    if (r.exitCode !== 0) {
      throw new FleetlabError('HIL_ERR_REGISTRY', `mmdebstrap could not fetch Debian's arm64 busybox-static (exit ${r.exitCode}); its last lines:\n${String(r.all).trim().split('\n').slice(-5).join('\n')}`);
    }
    await execa('tar', ['-C', work, '-xf', tarPath, './usr/bin/busybox']);
    renameSync(join(work, 'usr/bin/busybox'), path);
    return path;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** Starts the build engine with `fleetlab/busybox:latest` for arm64 in it. */
export async function startBuildEngine(o: { progress?: (line: string) => void } = {}): Promise<BuildEngine> {
  const progress = o.progress ?? (() => undefined);
  if (process.getuid?.() !== 0) {
    throw new FleetlabError('HIL_ERR_REGISTRY', 'building a release for an arm64 board runs a private dockerd, which needs root: run the tests as root (CI does)');
  }
  requireArm64Binfmt();
  const dockerd = findTool(dockerdTool, `${process.env.PATH ?? ''}:/usr/sbin:/sbin`);
  if (!dockerd) throw missingToolError(dockerdTool);
  await reapStaleBuildEngines();

  const dir = await mkdtemp(join(tmpdir(), DIR_PREFIX));
  // Interface names are at most 15 bytes: "flbe-" and the directory's random suffix.
  const bridge = `flbe-${dir.slice(-6)}`;
  if (!(await ip(['link', 'add', bridge, 'type', 'bridge'])) || !(await ip(['link', 'set', bridge, 'up']))) {
    await ip(['link', 'del', bridge]);
    await rm(dir, { recursive: true, force: true });
    throw new FleetlabError('HIL_ERR_REGISTRY', `the arm64 build engine needs a bridge of its own, and ip link add ${bridge} type bridge failed (root and iproute2 are needed)`);
  }
  const socketPath = join(dir, 'docker.sock');
  const logPath = join(dir, 'dockerd.log');
  // An empty config file: the host's /etc/docker/daemon.json (hosts, data-root) is the host engine's.
  await writeFile(join(dir, 'daemon.json'), '{}\n');
  const { child, exited, lastWords } = spawnOwned(dir, dockerd, [
    '--config-file', join(dir, 'daemon.json'),
    '--data-root', join(dir, 'data'),
    '--exec-root', join(dir, 'exec'),
    '--pidfile', join(dir, 'dockerd.pid'),
    '--host', `unix://${socketPath}`,
    `--bridge=${bridge}`, '--iptables=false', '--ip-masq=false',
  ], logPath, { bridge });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) await stopPid(child.pid!, () => child.exitCode !== null || child.signalCode !== null);
    await exited;
    await unmountUnder(dir);
    await ip(['link', 'del', bridge]);
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  };

  try {
    progress(`arm64 build engine: starting a private dockerd (${socketPath})`);
    const answers = async () => existsSync(socketPath) && (await engineAt(socketPath).then(() => true));
    await until('the arm64 build engine (dockerd)', answers, (ok) => ok, {
      timeoutMs: READY_MS,
      intervalMs: 200,
      alive: () => child.exitCode === null,
      fail: (f) =>
        new FleetlabError('HIL_ERR_REGISTRY', f.end === 'gone' ? `the arm64 build engine (dockerd) exited with ${child.exitCode} at start; its log ends:\n${lastWords()}` : `the arm64 build engine (dockerd) did not answer within ${READY_MS} ms; its log ends:\n${lastWords()}`),
    });
    await ensureBaseImage(socketPath, (e) => progress(`arm64 build engine: ${e.image}: ${e.step}`), { foreignArchitecture: 'arm64', cacheDir: cacheRoot() });
  } catch (err) {
    await stop();
    throw err instanceof FleetlabError ? err : new FleetlabError('HIL_ERR_REGISTRY', `the arm64 build engine did not start: ${errorText(err)}`, { cause: err });
  }
  return { socketPath, architecture: 'arm64', close: stop };
}
