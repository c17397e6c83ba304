/**
 * `fleetlab board install` and `uninstall` carried out over one SSH session: each step is one
 * shell script run as root on the board, and says what it did. The decisions are
 * ./install-plan.ts's; the files are ./layout.ts's. The manifest is written before each
 * change, so an install killed at any point is finished by the next install or undone by
 * uninstall, and running either twice changes nothing the second time.
 */
import { FleetlabError } from '../src/errors.js';
import { until } from '../src/wait.js';
import { supervisedObjectsWipeLines } from '../device-access/ssh-reset.js';
import type { ExecResult } from '../device-access/protocols.js';
import { BOARD, dockerDaemonConfigFor, ENV_FILE_HEADER, installEnv, ledLineFor, supervisorConfig, supervisorUnit } from '../device-image/board-layout.js';
import {
  aptCommand,
  checkBoard,
  missingPackages,
  OWN_PATHS,
  parseManifest,
  pathsMade,
  parseProbe,
  probeScript,
  type BoardProbe,
  type InstallManifest,
} from './install-plan.js';

/** What the steps need of the board's SSH session (device-access/ssh-device.ts is one). */
export interface BoardShell {
  readonly where: string;
  run(argv: readonly string[], options?: { input?: string | Buffer; timeoutMs?: number }): Promise<ExecResult>;
}

/** The supervisor to install, staged on this host (device-image/supervisor-payload.ts). */
export interface SupervisorPayload {
  /** A tar of `/opt/fleetlab` as it goes on the board (paths relative to it). */
  readonly tar: Buffer;
  /** Hash of the staged files: the manifest's `payload`. */
  readonly hash: string;
  readonly version: string;
  readonly node: string;
}

export interface InstallOptions {
  readonly payload: SupervisorPayload;
  /** Replace an installed supervisor of another build (its data is kept). */
  readonly upgrade?: boolean;
  /** `--led`: `<chip label>:<offset>`, a GPIO number, or `none`; default the model's ACT LED. */
  readonly led?: string;
  /** Install missing packages with the board's apt (default); false: stop and say what to run. */
  readonly apt?: boolean;
  /** From the supervisor's start to its `/ping`: default 5 min (the emulated Pi compiles the bundle for ~1 min). */
  readonly readyTimeoutMs?: number;
  readonly progress?: (line: string) => void;
  /** The supervisor's device type (config `deviceType`). */
  readonly deviceType?: string;
}

export interface InstallResult {
  readonly changed: boolean;
  readonly manifest: InstallManifest;
  readonly ledGpio: string;
}

const STEP_MS = 120_000;
const APT_MS = 30 * 60_000;
const SEND_MS = 15 * 60_000;
const DEFAULT_READY_MS = 5 * 60_000;
const SH_PATH = 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/**
 * Held by the unpacking of the supervisor's files, and taken by whatever touches them next: an
 * install killed while sending leaves its `tar` on the board writing until SSH notices the
 * session is gone, and removing the directory under it fails.
 */
const UNPACK_LOCK = '/run/lock/fleetlab-unpack';

function installError(message: string): FleetlabError {
  return new FleetlabError('HIL_ERR_BOARD_INSTALL', message);
}

function lastLines(text: string, n = 8): string {
  return text.trim().split('\n').slice(-n).join('\n');
}

/** Runs scripts as root on the board: directly as root, else through passwordless sudo. */
class RootShell {
  constructor(
    readonly shell: BoardShell,
    readonly user: string,
  ) {}

  get where(): string {
    return this.shell.where;
  }

  /** `sh -c script` as root, `args` as $1...; the result whatever the exit code. */
  async try(name: string, script: string, args: readonly string[] = [], options: { input?: string | Buffer; timeoutMs?: number } = {}): Promise<ExecResult> {
    const argv = ['sh', '-c', `${SH_PATH}\n${script}`, `fleetlab-${name}`, ...args];
    return this.shell.run(this.user === 'root' ? argv : ['sudo', '-n', ...argv], { timeoutMs: STEP_MS, ...options });
  }

  /** As `try`, and a failure is an error that names the step and ends with the board's output. */
  async must(step: string, script: string, args: readonly string[] = [], options: { input?: string | Buffer; timeoutMs?: number } = {}): Promise<string> {
    const r = await this.try(step.replace(/\W+/g, '-'), script, args, options);
    if (r.exitCode !== 0) throw installError(`${step} failed on ${this.where} (exit ${r.exitCode}):\n${lastLines(`${r.stdout}\n${r.stderr}`) || '(no output)'}`);
    return r.stdout;
  }

  async writeFile(step: string, path: string, content: string, mode = '0644'): Promise<void> {
    await this.must(step, 'set -e\nmkdir -p "$(dirname "$1")"\ncat > "$1.fleetlab-new"\nchmod "$2" "$1.fleetlab-new"\nmv -f "$1.fleetlab-new" "$1"', [path, mode], { input: content });
  }

  async readFile(path: string): Promise<string | undefined> {
    const r = await this.try('read', '[ -f "$1" ] || exit 3\ncat "$1"', [path]);
    if (r.exitCode === 3) return undefined;
    if (r.exitCode !== 0) throw installError(`cannot read ${path} on ${this.where}: ${lastLines(r.stderr) || `exit ${r.exitCode}`}`);
    return r.stdout;
  }
}

/** Connects as `user` and looks at the board once: refuses one the supervisor cannot run on. */
async function probe(root: RootShell, progress: (line: string) => void): Promise<BoardProbe> {
  if (root.user !== 'root') {
    const sudo = await root.shell.run(['sudo', '-n', 'true'], { timeoutMs: STEP_MS });
    if (sudo.exitCode !== 0) {
      throw installError(`${root.where}: the user ${root.user} cannot run sudo without a password (${lastLines(sudo.stderr, 1) || `exit ${sudo.exitCode}`}); install as root, or give ${root.user} passwordless sudo (Raspberry Pi OS's first user has it)`);
    }
  }
  const board = parseProbe(await root.must('looking at the board', probeScript()));
  checkBoard(board, root.where);
  const os = board.prettyName || board.osId;
  progress(`${os.includes(board.codename) ? os : `${os} (${board.codename})`}, ${board.arch}${board.model ? `, ${board.model}` : ''}`);
  return board;
}

function manifestOf(board: BoardProbe, where: string): InstallManifest | undefined {
  return board.manifest === undefined ? undefined : parseManifest(board.manifest, where);
}

/** Steps print as `[n/N] name: what happened`. */
function stepper(progress: (line: string) => void, total: number) {
  let n = 0;
  return (name: string) => {
    n += 1;
    const prefix = `[${n}/${total}] ${name}`;
    return (detail: string) => progress(`${prefix}: ${detail}`);
  };
}

export async function installBoard(shell: BoardShell, user: string, options: InstallOptions): Promise<InstallResult> {
  const progress = options.progress ?? (() => undefined);
  const root = new RootShell(shell, user);
  const step = stepper(progress, 7);
  let changed = false;

  const board = await probe(root, step('board'));
  const previous = manifestOf(board, root.where);
  if (previous && previous.payload !== options.payload.hash && !options.upgrade) {
    throw installError(
      `${root.where} already has fleetlab ${previous.version}'s supervisor (installed ${previous.installedAt}), not this build (${options.payload.version}): add --upgrade to replace it (its data, device identity and cloud link are kept), or run fleetlab board uninstall first`,
    );
  }
  const bootDir = previous?.bootDir ?? board.firmwareDir ?? BOARD.defaultBootDir;
  let manifest: InstallManifest = previous ?? {
    format: 1,
    version: options.payload.version,
    payload: '',
    node: options.payload.node,
    installedAt: new Date().toISOString(),
    packages: [],
    bootDir,
    created: [],
    ledGpio: '',
  };
  const save = async (next: InstallManifest) => {
    manifest = next;
    await root.writeFile('writing the install manifest', BOARD.manifest, `${JSON.stringify(next, null, 2)}\n`);
  };
  // Before any change: a killed install leaves a manifest that says what it had begun.
  if (!previous) await save(manifest);

  // Packages.
  const packagesStep = step('packages');
  const { packages, missing } = missingPackages(board);
  if (packages.length === 0) packagesStep('docker.io, redsocks, systemd and D-Bus are there');
  else {
    const command = aptCommand(packages);
    if (options.apt === false || !board.has.has('apt-get')) {
      throw installError(`${root.where} lacks ${missing.join(', ')}. Run on the board:\n  ${command}\nthen run fleetlab board install again`);
    }
    packagesStep(`installing ${packages.join(' ')} with apt-get (the board needs a way to its package mirror)`);
    await save({ ...manifest, packages: [...new Set([...manifest.packages, ...packages])] });
    const install = `export DEBIAN_FRONTEND=noninteractive\napt-get install -y --no-install-recommends "$@" || { apt-get update && apt-get install -y --no-install-recommends "$@"; }`;
    const r = await root.try('apt', install, packages, { timeoutMs: APT_MS });
    if (r.exitCode !== 0) {
      await save({ ...manifest, packages: manifest.packages.filter((p) => !packages.includes(p)) });
      throw installError(`${root.where} lacks ${missing.join(', ')}, and apt-get could not install them (exit ${r.exitCode}):\n${lastLines(`${r.stdout}\n${r.stderr}`, 5)}\nRun on the board:\n  ${command}\nthen run fleetlab board install again`);
    }
    changed = true;
    packagesStep(`installed ${packages.join(' ')}`);
  }

  // dockerd: its config, and the images already there (uninstall keeps those).
  const dockerStep = step('container engine');
  const before = await root.readFile(BOARD.dockerDaemonConfig);
  let wanted: { text: string; changed: boolean };
  try {
    wanted = dockerDaemonConfigFor(before);
  } catch (err) {
    throw installError(`${BOARD.dockerDaemonConfig} on ${root.where} is not a JSON object (${(err as Error).message}): fix it, then install again`);
  }
  // `systemctl enable` runs Debian's sysv-install helper (12 s on an emulated board): asked first.
  await root.must('starting dockerd', 'systemctl is-enabled -q docker.service && systemctl is-active -q docker.service && exit 0\nsystemctl enable --now docker.service >/dev/null 2>&1 || systemctl start docker.service');
  if (manifest.imagesBefore === undefined) {
    const images = (await root.must('listing the engine\'s images', 'docker image ls -q --no-trunc | sort -u')).split('\n').filter(Boolean);
    await save({ ...manifest, imagesBefore: images });
  }
  if (wanted.changed) {
    if (manifest.dockerConfigBefore === undefined) await save({ ...manifest, dockerConfigBefore: before ?? null });
    await root.writeFile('writing dockerd\'s config', BOARD.dockerDaemonConfig, wanted.text);
    await root.must('restarting dockerd', 'systemctl restart docker.service', [], { timeoutMs: STEP_MS * 2 });
    changed = true;
    dockerStep(`container output now goes to the journal (log-driver journald in ${BOARD.dockerDaemonConfig}); dockerd restarted`);
  } else dockerStep('dockerd running, logging to the journal');

  // The supervisor's files: Node and the bundle, swapped in whole.
  const filesStep = step('supervisor');
  if (manifest.payload === options.payload.hash) filesStep(`fleetlab ${options.payload.version} already there (${BOARD.appDir})`);
  else {
    filesStep(`sending fleetlab ${options.payload.version} with ${options.payload.node} (${(options.payload.tar.length / 1024 ** 2).toFixed(0)} MB) to ${BOARD.appDir}`);
    const t0 = Date.now();
    await root.must('unpacking the supervisor', `exec flock -w 300 ${UNPACK_LOCK} sh -c 'set -e; rm -rf "$1.new"; mkdir -p "$1.new"; tar -C "$1.new" -xf -' unpack "$1"`, [BOARD.appDir], { input: options.payload.tar, timeoutMs: SEND_MS });
    await root.must('stopping the supervisor', `systemctl stop ${BOARD.unit} 2>/dev/null || true`);
    await root.must('putting the supervisor in place', 'set -e\nrm -rf "$1.old"\nif [ -d "$1" ]; then mv "$1" "$1.old"; fi\nmv "$1.new" "$1"\nrm -rf "$1.old"', [BOARD.appDir]);
    await save({ ...manifest, payload: options.payload.hash, version: options.payload.version, node: options.payload.node });
    changed = true;
    filesStep(`in place in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }

  // Config: the supervisor's, the install's (LED), and the user's own env file left alone.
  const configStep = step('config');
  const led = ledLineFor(options.led, board.model);
  // What of the boot files the board lacks is the install's to make, and uninstall's to remove
  // (a directory made takes what is in it along; Raspberry Pi OS's own config.txt stays).
  const bootPaths = [bootDir, `${bootDir}/system-proxy`, `${bootDir}/config.txt`];
  const absent = (await root.must('checking the boot files', 'for p in "$@"; do [ -e "$p" ] || echo "$p"; done', bootPaths)).split('\n').filter(Boolean);
  const made = pathsMade(absent, manifest.created);
  if (made.length) await save({ ...manifest, created: [...manifest.created, ...made] });
  const files: Array<[string, string]> = [
    [BOARD.configFile, `${JSON.stringify(supervisorConfig({ bootDir, deviceType: options.deviceType ?? 'raspberrypi' }), null, 2)}\n`],
    [BOARD.installEnvFile, installEnv({ ledGpio: led.line })],
  ];
  let configChanged = false;
  for (const [path, content] of files) {
    if ((await root.readFile(path)) === content) continue;
    await root.writeFile(`writing ${path}`, path, content);
    configChanged = true;
  }
  await root.must('preparing the supervisor\'s directories', 'set -e\n[ -f "$1" ] || printf "%s" "$2" > "$1"\nmkdir -p "$3/system-proxy"\n[ -f "$3/config.txt" ] || : > "$3/config.txt"', [BOARD.envFile, ENV_FILE_HEADER, bootDir]);
  if (manifest.ledGpio !== led.line) await save({ ...manifest, ledGpio: led.line });
  changed ||= configChanged;
  const ledText = led.line ? `LED ${led.line}${led.source === 'model' ? ` (the ${board.model}'s ACT LED; --led changes it)` : ''}` : 'no LED (--led <chip label>:<offset> names one)';
  configStep(`${configChanged ? 'written' : 'unchanged'}: ${BOARD.configFile}, boot files in ${bootDir}, ${ledText}`);

  // The unit.
  const unitStep = step('service');
  const unit = supervisorUnit();
  const unitChanged = (await root.readFile(BOARD.unitFile)) !== unit;
  if (unitChanged) await root.writeFile(`writing ${BOARD.unitFile}`, BOARD.unitFile, unit);
  const restart = unitChanged || changed;
  // Nothing changed and the unit enabled and running: no daemon-reload (6 s on an emulated board).
  const settled = restart ? '' : `systemctl is-enabled -q ${BOARD.unit} && systemctl is-active -q ${BOARD.unit} && exit 0\n`;
  await root.must('starting the supervisor', `${settled}set -e\nsystemctl daemon-reload\nsystemctl enable ${BOARD.unit} >/dev/null 2>&1\nsystemctl ${restart ? 'restart' : 'start'} ${BOARD.unit}`);
  changed ||= unitChanged;
  unitStep(`${BOARD.unit} enabled and ${restart ? '(re)started' : 'running'}`);

  // Ready: the API answers on the board itself.
  const readyStep = step('ready');
  const t0 = Date.now();
  await waitForApi(root, options.readyTimeoutMs ?? DEFAULT_READY_MS);
  readyStep(`the supervisor answers http://127.0.0.1:${BOARD.apiPort}/ping on the board (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  return { changed, manifest, ledGpio: led.line };
}

/** Polls `/ping` from the board itself (bash's /dev/tcp: no curl needed), up to `timeoutMs`. */
async function waitForApi(root: RootShell, timeoutMs: number): Promise<void> {
  const ping = `exec 3<>/dev/tcp/127.0.0.1/${BOARD.apiPort} || exit 1\nprintf 'GET /ping HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3\nhead -c 12 <&3`;
  await until(`the supervisor on ${root.where} answers /ping`, () => root.try('ping', 'exec bash -c "$1"', [ping], { timeoutMs: 15_000 }), (r) => /^HTTP\/1\.[01] 200/.test(r.stdout), {
    timeoutMs,
    intervalMs: 2000,
    // root.try reports a failing command in its result; what it throws (SSH is gone) ends the install.
    stopOn: () => true,
    // The install's error carries the supervisor's journal, which says why it does not answer.
    fail: async (f) => {
      if (f.end !== 'timeout') return undefined;
      const r = f.last && 'value' in f.last ? f.last.value : undefined;
      const last = r ? r.stdout.trim() || r.stderr.trim() : '';
      const journal = await root.try('journal', `journalctl -u ${BOARD.unit} -n 15 --no-pager`);
      return installError(`the supervisor on ${root.where} did not answer /ping within ${Math.round(timeoutMs / 1000)} s (${last || 'no answer'}); its journal ends:\n${journal.stdout.trim()}`);
    },
  });
}

export interface UninstallOptions {
  /** Keep the engine images that came after the install (default: remove them). */
  readonly keepImages?: boolean;
  /** Keep the packages the install added (default: purge them). */
  readonly keepPackages?: boolean;
  readonly progress?: (line: string) => void;
}

export async function uninstallBoard(shell: BoardShell, user: string, options: UninstallOptions = {}): Promise<{ removed: boolean }> {
  const progress = options.progress ?? (() => undefined);
  const root = new RootShell(shell, user);
  const step = stepper(progress, 6);
  const board = await probe(root, step('board'));
  const manifest = manifestOf(board, root.where);
  const present = (await root.try('any', 'for p in "$@"; do [ -e "$p" ] && exit 0; done; exit 1', [...OWN_PATHS])).exitCode === 0;
  if (!manifest && !present) {
    progress('nothing of fleetlab\'s is on this board');
    return { removed: false };
  }

  const serviceStep = step('service');
  await root.must('stopping the supervisor', `systemctl disable --now ${BOARD.unit} >/dev/null 2>&1 || true\nrm -f ${BOARD.unitFile}\nsystemctl daemon-reload\nsystemctl reset-failed ${BOARD.unit} >/dev/null 2>&1 || true`);
  serviceStep(`${BOARD.unit} stopped, disabled and removed`);

  const engineStep = step('containers');
  if (board.has.has('docker')) {
    await root.must('removing the supervisor\'s containers', ['set -e', ...supervisedObjectsWipeLines()].join('\n'), [], { timeoutMs: STEP_MS * 3 });
    if (!options.keepImages && manifest?.imagesBefore) {
      const now = (await root.must('listing the engine\'s images', 'docker image ls -q --no-trunc | sort -u')).split('\n').filter(Boolean);
      const added = now.filter((id) => !manifest.imagesBefore!.includes(id));
      // Untagging every reference first: an image tagged twice is removed by id only with -f.
      if (added.length) await root.must('removing images', 'docker image rm -f "$@" >/dev/null', added, { timeoutMs: STEP_MS * 3 });
      engineStep(`its containers, volumes and networks removed; ${added.length} image(s) that came after the install removed`);
    } else engineStep(`its containers, volumes and networks removed${options.keepImages ? '; images kept (--keep-images)' : ''}`);
  } else engineStep('no docker command on the board: nothing to remove');

  const dockerStep = step('container engine');
  if (manifest && manifest.dockerConfigBefore !== undefined) {
    if (manifest.dockerConfigBefore === null) await root.must('removing dockerd\'s config', `rm -f ${BOARD.dockerDaemonConfig}`);
    else await root.writeFile('restoring dockerd\'s config', BOARD.dockerDaemonConfig, manifest.dockerConfigBefore);
    await root.must('restarting dockerd', 'systemctl try-restart docker.service', [], { timeoutMs: STEP_MS * 2 });
    dockerStep(`${BOARD.dockerDaemonConfig} as it was before the install; dockerd restarted`);
  } else dockerStep(`${BOARD.dockerDaemonConfig} was not changed by the install`);

  const filesStep = step('files');
  const paths = [...OWN_PATHS.filter((p) => p !== BOARD.configDir), ...(manifest?.created ?? []), `${BOARD.appDir}.new`, `${BOARD.appDir}.old`];
  await root.must('removing fleetlab\'s files', `flock -w 300 ${UNPACK_LOCK} rm -rf -- "$@"`, paths, { timeoutMs: STEP_MS * 3 });
  filesStep(`removed ${paths.filter((p) => !p.endsWith('.new') && !p.endsWith('.old')).join(', ')}`);

  const packagesStep = step('packages');
  const packages = manifest?.packages ?? [];
  if (packages.length && !options.keepPackages) {
    await root.must('purging the packages the install added', 'export DEBIAN_FRONTEND=noninteractive\napt-get purge -y --auto-remove "$@"', packages, { timeoutMs: APT_MS });
    packagesStep(`purged ${packages.join(' ')}`);
  } else packagesStep(packages.length ? `kept ${packages.join(' ')} (--keep-packages)` : 'the install added none');

  // The manifest goes last: an uninstall killed before this point runs again from it.
  await root.must('removing the install manifest', `rm -rf -- ${BOARD.configDir}`);
  progress(`fleetlab is off ${root.where}`);
  return { removed: true };
}
