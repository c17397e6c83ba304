/**
 * `fleetlab test`: runs a device team's specs with Playwright Test (the runner fleetlab
 * brings) on one target, with the team's fleetlab.config. Checks what the target needs
 * first, so a missing piece is one sentence rather than a failed worker.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { join, resolve } from 'node:path';
import { FLASH_IMAGE_VARIABLE } from '../../device-image/card-plan.js';
import { payloadSource, PREBUILT_PAYLOAD_DIR } from '../../device-image/payload.js';
import { FleetlabError } from '../../src/errors.js';
import { fleetlabRoot } from '../../src/package-root.js';
import { userTmpDir } from '../../src/user-tmp.js';
import { engineAt } from '../../src/engine-client/engine-at.js';
import { requireUserNamespace } from '../../sim/gpio/namespace.js';
import { requireNativeModules, type NativeModule } from '../../src/native-modules.js';
import { stoppedWithParent } from '../../src/processes.js';
import { readLab } from '../lab/lab-command.js';
import { matchingBoards } from '../lab/lab-file.js';
import { LAB_TAGS_VARIABLE, LAB_VARIABLE } from '../lab/worker-lease.js';
import { SLOW_TARGETS, targetNames } from '../targets/index.js';
import { SUPERVISOR_VERSION_VARIABLE } from './supervisor-version.js';
import { formatVersion, parseSupervisorVersion } from '../../src/supervisor/versions.js';

export const CONFIG_NAMES = ['fleetlab.config.ts', 'fleetlab.config.mts', 'fleetlab.config.js', 'fleetlab.config.mjs'] as const;

export interface RunOptions {
  cwd: string;
  target: string;
  /** Run every test N times (Playwright's --repeat-each). */
  repeat?: number;
  /** `i/n`: this machine's share of the suite. */
  shard?: string;
  /** Passed to Playwright Test as they are (a grep, a spec file, --reporter, ...). */
  playwrightArgs: readonly string[];
  dockerSocket?: string;
  /**
   * `--lab FILE --tag T`: each Playwright worker leases a board of its own with the tags from
   * the lab file (hil/lab/worker-lease.ts); as many workers as such boards unless told.
   */
  lab?: { file: string; tags: readonly string[] };
  /** `--flash-image FILE` with --target qemu: boot this card image (fleetlab card build) on virt instead of the emulated Pi's own image. */
  flashImage?: string;
  /** `--supervisor-version X.Y.Z`: the devices answer as that upstream supervisor, over fleetlab.config's `supervisorVersion`. */
  supervisorVersion?: string;
}

/** Workers (each with a board of its own) of a qemu run on a machine with `cores` cores, unless told. */
export function qemuWorkers(cores: number): number {
  return Math.max(1, Math.floor(cores / 2));
}

/** Playwright's arguments for the run; pure, so the flag mapping is tested without a run. */
export function playwrightArgv(config: string, o: Pick<RunOptions, 'target' | 'repeat' | 'shard' | 'playwrightArgs'> & { workers?: number }): string[] {
  if (!targetNames.includes(o.target)) throw new FleetlabError('HIL_ERR_COMPOSE', `--target must be one of ${targetNames.join(', ')}, not ${JSON.stringify(o.target)}`);
  const argv = ['test', '-c', config, `--project=${o.target}`];
  if (o.repeat !== undefined) {
    if (!Number.isInteger(o.repeat) || o.repeat < 1) throw new FleetlabError('HIL_ERR_COMPOSE', `--repeat must be a positive integer, not ${o.repeat}`);
    argv.push(`--repeat-each=${o.repeat}`);
  }
  if (o.shard !== undefined) {
    const m = /^(\d+)\/(\d+)$/.exec(o.shard);
    if (!m || Number(m[1]) < 1 || Number(m[1]) > Number(m[2])) throw new FleetlabError('HIL_ERR_COMPOSE', `--shard must be i/n with 1 <= i <= n (e.g. 2/4), not ${JSON.stringify(o.shard)}`);
    argv.push(`--shard=${o.shard}`);
  }
  // A board is one device and an emulated one takes both cores: one worker, unless told (or a
  // lab has several boards for the run).
  if (SLOW_TARGETS.has(o.target) && !o.playwrightArgs.some((a) => a.startsWith('--workers') || a === '-j')) argv.push(`--workers=${o.workers ?? 1}`);
  return [...argv, ...o.playwrightArgs];
}

function findConfig(cwd: string): string {
  const found = CONFIG_NAMES.map((n) => join(cwd, n)).find((p) => existsSync(p));
  if (!found) throw new FleetlabError('HIL_ERR_COMPOSE', `no ${CONFIG_NAMES[0]} in ${cwd}: run npx fleetlab init here first (it writes one for your compose file)`);
  return found;
}

/**
 * The qemu target builds its board image from fleetlab's sources (a checkout) or from the
 * payload `npm pack` prebuilt into the package (device-image/payload.ts); a package packed
 * without it cannot make one.
 */
function requirePayloadFor(target: string): void {
  if (target !== 'qemu') return;
  const root = fleetlabRoot(import.meta.url);
  if (!payloadSource(root)) {
    throw new FleetlabError(
      'HIL_ERR_DEPLOY',
      `--target ${target}: this fleetlab (${root}) has no board payload (${PREBUILT_PAYLOAD_DIR}), which npm pack writes: reinstall it from a tarball npm pack made, or run from a fleetlab checkout`,
    );
  }
}

/** Runs the specs; resolves with Playwright's exit code. */
export async function runTests(options: RunOptions): Promise<number> {
  const versionEnv = options.supervisorVersion === undefined ? {} : { [SUPERVISOR_VERSION_VARIABLE]: formatVersion(parseSupervisorVersion(options.supervisorVersion, '--supervisor-version')) };
  let labEnv: Record<string, string> = {};
  if (options.flashImage) {
    if (options.target !== 'qemu') throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--flash-image boots a card image under QEMU: add --target qemu (got --target ${options.target})`);
    const card = resolve(options.cwd, options.flashImage);
    if (!existsSync(card)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--flash-image ${card} does not exist (fleetlab card build --board rpi4 makes one)`);
    labEnv = { [FLASH_IMAGE_VARIABLE]: card, FLEETLAB_QEMU_MACHINE: 'virt' };
  } else requirePayloadFor(options.target);
  const config = findConfig(options.cwd);
  let workers: number | undefined;
  if (options.lab) {
    if (options.target !== 'board') throw new FleetlabError('HIL_ERR_LAB', `--lab hands out lab boards, which is the board target's: add --target board (got --target ${options.target})`);
    const file = resolve(options.cwd, options.lab.file);
    // No matching board is said now, not by every worker.
    workers = matchingBoards(readLab(file), options.lab.tags).length;
    labEnv = { [LAB_VARIABLE]: file, [LAB_TAGS_VARIABLE]: options.lab.tags.join(',') };
  }
  // An emulated board keeps two cores busy: a board per two cores, each worker its own.
  if (options.target === 'qemu') workers = qemuWorkers(availableParallelism());
  const argv = playwrightArgv(config, { ...options, ...(workers !== undefined ? { workers } : {}) });
  const dockerSocket = options.dockerSocket ?? process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
  await checkTargetHost(options.target, dockerSocket, 'fleetlab test');

  const cli = createRequire(import.meta.url).resolve('@playwright/test/cli');
  // Playwright gets SIGINT when this process ends in any way (kill -9 too): it then stops the
  // run as on Ctrl-C, its workers stopping their boards, rather than running on with no one
  // to wait for it.
  const child = spawn(...stoppedWithParent(process.execPath, [cli, ...argv], 'SIGINT'), {
    cwd: options.cwd,
    stdio: 'inherit',
    env: { ...process.env, ...harnessEnv(dockerSocket), ...labEnv, ...versionEnv },
  });
  // Ctrl-C reaches Playwright from the terminal itself (same process group), and a second
  // one would force it: this process only stays alive for it. SIGTERM is passed on.
  const ignore = () => undefined;
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  process.on('SIGINT', ignore);
  process.on('SIGTERM', forward);
  try {
    return await new Promise<number>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
    });
  } finally {
    process.off('SIGINT', ignore);
    process.off('SIGTERM', forward);
  }
}

/**
 * What this host needs before a device of `target` starts here, each missing piece said once
 * with what to install: the native modules, user namespaces for a sim device, dockerd.
 */
export async function checkTargetHost(target: string, dockerSocket: string, command: string): Promise<void> {
  // The supervisor of a sim device loads epoll here; a spec with a cloud loads better-sqlite3.
  const native: NativeModule[] = target === 'sim' ? ['epoll', 'better-sqlite3'] : ['better-sqlite3'];
  requireNativeModules(native);
  // Said once here rather than by every worker's first device.
  if (target === 'sim') requireUserNamespace();
  if (target === 'sim' || target === 'container') {
    await engineAt(dockerSocket, 'install and start it (apt-get install docker.io; systemctl start docker), or set FLEETLAB_DOCKER_SOCKET', `${command} --target ${target} runs your app's containers on dockerd: `);
  }
}

/**
 * The environment a team's devices run in: temporary files in the user's own directory (what
 * takes a fixed name there, testcontainers' lock file, is then never another user's, as it can
 * be in the shared /tmp after a run as root), the app on dockerd, the engine socket.
 */
export function harnessEnv(dockerSocket: string): Record<string, string> {
  return { TMPDIR: userTmpDir(), FLEETLAB_HIL_ENGINE: process.env.FLEETLAB_HIL_ENGINE ?? 'docker', TESTCONTAINERS_RYUK_DISABLED: 'true', FLEETLAB_DOCKER_SOCKET: dockerSocket };
}
