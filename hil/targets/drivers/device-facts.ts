/**
 * What a device knows about itself and the target reads rather than guesses: who it is (the
 * supervisor's store), where an app's named volume lives (its engine), its supervisor's log.
 */
import type Docker from 'dockerode';
import { FleetlabError, errorText } from '../../../src/errors.js';
import { LABEL } from '../../../src/protocol/engine-labels.js';
import type { SshDevice } from '../../../device-access/ssh-device.js';
import { until } from '../../../src/wait.js';

/** Between reads of a store the supervisor has not written yet. */
const STORE_RETRY_MS = 1000;

const hostError = (message: string, cause?: unknown) => new FleetlabError('SUP_ERR_HOST', message, cause === undefined ? undefined : { cause });

/** uuid and device key from the supervisor's store (src/supervisor/state/store.ts: <dataDir>/device.json). */
export async function storedIdentity(ssh: SshDevice, dataDir: string): Promise<{ uuid: string; deviceKey: string }> {
  const path = `${dataDir}/device.json`;
  let text: string;
  try {
    text = (await ssh.files.read(path)).toString('utf8');
  } catch (err) {
    throw hostError(`cannot read the supervisor's store ${path} on the board (${errorText(err)}); has the supervisor run there once, and is "dataDir" in the board config right?`, err);
  }
  let record: { uuid?: unknown; deviceKey?: unknown };
  try {
    record = JSON.parse(text) as typeof record;
  } catch (err) {
    throw hostError(`the supervisor's store ${path} on the board is not JSON: ${errorText(err)}`, err);
  }
  if (typeof record.uuid !== 'string' || typeof record.deviceKey !== 'string') throw hostError(`the supervisor's store ${path} on the board has no uuid/deviceKey`);
  return { uuid: record.uuid, deviceKey: record.deviceKey };
}

/**
 * The identity once the supervisor has written its store (right after a reset it has not
 * yet). On src/wait.ts's `until`, not pollUntil: the deadline is the board's own, stretched
 * already, and the store's own error is what a timeout should say.
 */
export function waitStoredIdentity(ssh: SshDevice, dataDir: string, timeoutMs: number): Promise<{ uuid: string; deviceKey: string }> {
  return until('the supervisor\'s stored identity', () => storedIdentity(ssh, dataDir), () => true, {
    timeoutMs,
    intervalMs: STORE_RETRY_MS,
    fail: (f) => (f.last && 'error' in f.last && f.last.error instanceof Error ? f.last.error : undefined),
  });
}

const volumeLabels = (uuid: string, appId: number, volume: string) => [`${LABEL.device}=${uuid}`, `${LABEL.appId}=${appId}`, `${LABEL.volume}=${volume}`];

/** Where the named volume of an app lives on the device, asked of the device's dockerd over SSH. */
export async function dockerVolumePath(ssh: SshDevice, uuid: string, appId: number, volume: string): Promise<string | undefined> {
  const filters = volumeLabels(uuid, appId, volume).flatMap((f) => ['--filter', `label=${f}`]);
  // One docker call: each costs ~1 s on an emulated board (the CLI's start under TCG).
  const listed = await ssh.run(['docker', 'volume', 'ls', '--format', '{{.Mountpoint}}', ...filters]);
  if (listed.exitCode !== 0) throw hostError(`docker volume ls on the device: ${listed.stderr.trim() || `exit ${listed.exitCode}`}`);
  return listed.stdout.split('\n').map((l) => l.trim()).find(Boolean);
}

/** The same, asked of an engine the harness reaches (the device's engine is this host's). */
export async function engineVolumePath(docker: Docker, uuid: string, appId: number, volume: string): Promise<string | undefined> {
  const { Volumes } = await docker.listVolumes({ filters: { label: volumeLabels(uuid, appId, volume) } });
  return Volumes?.[0]?.Mountpoint;
}

/** A systemd unit's journal on the device (the supervisor's log for failed tests). */
export async function unitLog(ssh: SshDevice, unit: string): Promise<string> {
  try {
    const r = await ssh.run(['journalctl', '--no-pager', '-o', 'short-iso', '--lines', '2000', '--unit', unit]);
    return r.stdout || `(no supervisor log: journalctl exited ${r.exitCode}: ${r.stderr.trim()})`;
  } catch (err) {
    return `(no supervisor log: ${errorText(err)})`;
  }
}
