/**
 * `fleetlab board install|uninstall ssh://user@host`: the SSH session, the SSH key, and the
 * supervisor staged on this host as one tar; the steps are ./install.ts's.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { FleetlabError, errorText } from '../src/errors.js';
import { fleetlabVersion } from '../src/package-root.js';
import { SshDevice } from '../device-access/ssh-device.js';
import { payloadSource, PREBUILT_PAYLOAD_DIR } from '../device-image/payload.js';
import { cacheRoot } from '../device-image/tools.js';
import { BOARD } from '../device-image/board-layout.js';
import { parseSshTarget, type SshTarget } from './install-plan.js';
import { installBoard, uninstallBoard, type SupervisorPayload } from './install.js';
import { stageSupervisor } from '../device-image/supervisor-payload.js';

/** Keys tried, in order, when --identity is not given (OpenSSH's own defaults). */
const DEFAULT_KEYS = ['id_ed25519', 'id_ecdsa', 'id_rsa'];
const REACH_MS = 30_000;

export interface BoardCommandOptions {
  /** The SSH private key; default ~/.ssh/id_ed25519, id_ecdsa or id_rsa. */
  readonly identity?: string;
  readonly progress: (line: string) => void;
}

function installError(message: string, cause?: unknown): FleetlabError {
  return new FleetlabError('HIL_ERR_BOARD_INSTALL', message, cause === undefined ? undefined : { cause });
}

async function privateKey(identity: string | undefined, home = homedir()): Promise<{ path: string; key: Buffer }> {
  const candidates = identity ? [resolve(identity)] : DEFAULT_KEYS.map((k) => join(home, '.ssh', k));
  const path = candidates.find((p) => existsSync(p));
  if (!path) {
    throw installError(identity ? `--identity ${identity}: no such file` : `no SSH key in ${join(home, '.ssh')} (${DEFAULT_KEYS.join(', ')}): pass --identity <private key file> with a key the board accepts`);
  }
  try {
    return { path, key: await readFile(path) };
  } catch (err) {
    throw installError(`cannot read the SSH key ${path}: ${errorText(err)}`, err);
  }
}

/** Opens the session and checks the board answers, with the target's own words in the error. */
async function connect(target: SshTarget, identity: string | undefined, progress: (line: string) => void): Promise<{ ssh: SshDevice; keyPath: string }> {
  const { path, key } = await privateKey(identity);
  progress(`connecting to ${target.user}@${target.host}:${target.port} with ${path} (up to ${REACH_MS / 1000} s)`);
  const ssh = new SshDevice({ host: target.host, port: target.port, username: target.user, privateKey: key });
  try {
    await ssh.waitReachable(REACH_MS);
  } catch (err) {
    await ssh.close();
    throw installError(`cannot log in to ${target.user}@${target.host}:${target.port} with ${path}: ${errorText(err)}`, err);
  }
  return { ssh, keyPath: path };
}

/** The supervisor for the board from this fleetlab (its sources, or the package's prebuilt payload), as a tar. */
export async function supervisorPayload(repoRoot: string, progress: (line: string) => void): Promise<SupervisorPayload> {
  const source = payloadSource(repoRoot);
  if (!source) throw installError(`${repoRoot} has neither fleetlab's sources nor its prebuilt board payload (${PREBUILT_PAYLOAD_DIR}): reinstall fleetlab`);
  const cacheDir = join(cacheRoot(), 'qemu');
  const stage = await mkdtemp(join(tmpdir(), 'fleetlab-board-payload-'));
  try {
    const staged = await stageSupervisor({ repoRoot, source, cacheDir, stage, report: (_f, detail) => progress(`payload: ${detail}`) });
    // Same bytes for the same files: the hash says whether the board already has them.
    const tar = await execa('tar', ['-C', join(stage, BOARD.appDir), '--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner', '-cf', '-', '.'], { encoding: 'buffer', maxBuffer: 1024 ** 3 });
    const bytes = Buffer.from(tar.stdout);
    return { tar: bytes, hash: createHash('sha256').update(bytes).digest('hex'), version: fleetlabVersion(import.meta.url), node: staged.node };
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}

export async function boardInstallCommand(address: string, options: BoardCommandOptions & { repoRoot: string; upgrade: boolean; led?: string; apt: boolean }): Promise<void> {
  const target = parseSshTarget(address);
  // The board first: a wrong key or address is said before the payload is built.
  const { ssh, keyPath } = await connect(target, options.identity, options.progress);
  try {
    const payload = await supervisorPayload(options.repoRoot, options.progress);
    const result = await installBoard(ssh, target.user, {
      payload,
      upgrade: options.upgrade,
      apt: options.apt,
      progress: options.progress,
      ...(options.led !== undefined ? { led: options.led } : {}),
    });
    options.progress(result.changed ? `installed fleetlab ${payload.version} on ${ssh.where}` : `nothing to do: fleetlab ${payload.version} is installed and running on ${ssh.where}`);
    // What the HIL `board` target needs to reach this board (FLEETLAB_BOARD_CONFIG, or a lab file's board).
    const bootDir = result.manifest.bootDir;
    const config = {
      host: target.host,
      ...(target.port !== 22 ? { sshPort: target.port } : {}),
      user: target.user,
      privateKey: keyPath,
      ...(result.ledGpio ? { led: { gpio: result.ledGpio, observe: 'sysfs' } } : {}),
      ...(bootDir !== BOARD.defaultBootDir ? { hostPaths: { proxyConfigDir: `${bootDir}/system-proxy`, bootConfig: `${bootDir}/config.txt` } } : {}),
    };
    console.log(JSON.stringify({ event: 'installed', changed: result.changed, version: payload.version, board: `${target.user}@${target.host}:${target.port}`, boardConfig: config }));
  } finally {
    await ssh.close();
  }
}

export async function boardUninstallCommand(address: string, options: BoardCommandOptions & { keepImages: boolean; keepPackages: boolean }): Promise<void> {
  const target = parseSshTarget(address);
  const { ssh } = await connect(target, options.identity, options.progress);
  try {
    const { removed } = await uninstallBoard(ssh, target.user, { keepImages: options.keepImages, keepPackages: options.keepPackages, progress: options.progress });
    console.log(JSON.stringify({ event: 'uninstalled', removed, board: `${target.user}@${target.host}:${target.port}` }));
  } finally {
    await ssh.close();
  }
}
