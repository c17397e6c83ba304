/**
 * `fleetlab capture` and `fleetlab bundle show` from the command line: flags in, a bundle
 * (or its summary) out, progress on stderr. Ctrl-C ends the capture after the step it is in,
 * with the bundle marked incomplete; a second Ctrl-C stops at once (no bundle at `--out`).
 */
import { errorText, FleetlabError } from '../../src/errors.js';
import { readFile, writeFile } from 'node:fs/promises';
import { BOARD_CONFIG_VARIABLE, loadBoardConfig } from '../lab/board-config.js';
import { storedIdentity } from '../targets/drivers/device-facts.js';
import { SshDevice } from '../../device-access/ssh-device.js';
import type { ApiProtocol, CommandProtocol, DevicePaths } from '../../device-access/protocols.js';
import { fleetlabVersion } from '../../src/package-root.js';
import { freePort } from '../../src/free-port.js';
import { httpApiAt } from '../lib/http.js';
import { readBundle, type BundleSource, type Redaction } from '../capture/bundle.js';
import { captureDevice, DEFAULT_JOURNAL_ENTRIES, type CaptureOptions } from '../capture/capture.js';
import { cloudReader, proxiedApi, readCloudRows } from '../capture/cloud-access.js';
import { hostShell } from '../targets/host-shell.js';
import { simDeviceFiles } from '../../sim/device.js';
import { storedUuid } from '../../sim/device-leftovers.js';
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { showBundle } from '../capture/show.js';
import { bundleTimeline } from '../capture/timeline.js';
import { renderTimelineHtml } from '../lib/timeline/render.js';

export interface CaptureCommandOptions {
  /** The device API (with `apiKey`), or... */
  device?: string;
  apiKey?: string;
  /** ...a lab board's config (the board target's JSON): SSH, its API and where its supervisor keeps its files, or... */
  board?: string;
  /** ...a fleetlab cloud the device is registered to (its proxy and data API), with a user's key, and the device's uuid. */
  cloud?: string;
  cloudKey?: string;
  uuid?: string;
  /** A simulated device's state directory on this host: the capture gets a shell and its paths. */
  simDir?: string;
  out?: string;
  since?: string;
  journalEntries?: number;
  /** Also the volumes' contents, each up to this many bytes (not redacted). */
  volumeBytes?: number;
  redaction: Redaction;
  force: boolean;
  log: (line: string) => void;
}

const usage = (message: string) => new FleetlabError('HIL_ERR_CAPTURE', message);

/** The device API's base URL, checked: http(s), no path, no credentials in it. */
export function deviceUrl(value: string, flag = '--device'): string {
  const what = flag === '--device' ? "the device API's URL, such as http://127.0.0.1:48484" : 'the cloud API\'s URL, such as http://127.0.0.1:48400';
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw usage(`${flag} must be ${what}, not ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw usage(`${flag} must be an http:// or https:// URL, not ${JSON.stringify(value)}`);
  if (url.username || url.password) throw usage(`${flag} must not carry credentials: pass the key with ${flag === '--device' ? '--api-key' : '--cloud-key'}`);
  return url.origin;
}

export const defaultBundleName = (now: Date) => `fleetlab-capture-${now.toISOString().replace(/[:.]/g, '-')}.tar.gz`;

/** How the capture reaches the device: its API, a shell, where its files are; what to close after. */
interface Access {
  api: Pick<ApiProtocol, 'request'>;
  /** The key the capture authenticates with (kept out of the bundle). */
  key: string;
  source: BundleSource;
  exec?: CommandProtocol;
  paths?: DevicePaths;
  cloudRows?: CaptureOptions['cloudRows'];
  close(): Promise<void>;
}

/**
 * `--device` (`--sim-dir`), `--board`, or `--cloud` alone (through its proxy), checked. `--cloud`
 * beside `--device` or `--board` reaches the device directly and adds its rows of that cloud.
 */
async function accessOf(options: CaptureCommandOptions): Promise<Access> {
  const ways = [options.device && '--device', options.board && '--board'].filter(Boolean);
  if (ways.length > 1) throw usage(`${ways.join(' and ')} are two ways to reach a device: give one`);
  if (!ways.length && options.cloud) return cloudAccess(options);
  const access = await directAccess(options);
  if (!options.cloud) return access;
  try {
    return { ...access, cloudRows: rowsOf(options, access.source.uuid ?? (options.simDir ? storedUuid(resolve(options.simDir)) : undefined)) };
  } catch (err) {
    await access.close();
    throw err;
  }
}

/** The device's rows of the cloud at `--cloud`, beside a capture that reaches the device directly. */
function rowsOf(options: CaptureCommandOptions, storedUuid: string | undefined): NonNullable<Access['cloudRows']> {
  const cloud = deviceUrl(options.cloud!, '--cloud');
  if (!options.cloudKey) throw usage("--cloud needs --cloud-key: a user's API key of that cloud, to read the device's rows");
  const uuid = options.uuid ?? storedUuid;
  if (!uuid) throw usage("--cloud with --device needs --uuid (or --sim-dir, whose store names the device): the device's uuid in that cloud");
  return (redact) => readCloudRows(cloudReader(cloud, options.cloudKey!), uuid, redact);
}

async function directAccess(options: CaptureCommandOptions): Promise<Access> {
  if (options.board) {
    if (options.simDir) throw usage('--sim-dir goes with --device: --board reaches the device by its config');
    return boardAccess(options.board, options.apiKey);
  }
  if (!options.device) throw usage('say which device: --device URL --api-key KEY (a simulated device here: add --sim-dir), --board CONFIG (a lab board over SSH), or --cloud URL --cloud-key KEY --uuid UUID (through a fleetlab cloud; beside --device or --board it adds the device\'s cloud rows)');
  if (!options.apiKey) throw usage("--device needs --api-key: the device's key");
  const url = deviceUrl(options.device);
  const local = options.simDir ? { exec: hostShell, paths: simDevicePaths(options.simDir) } : {};
  return { api: httpApiAt(url, options.apiKey), key: options.apiKey, source: { kind: 'api', address: url }, ...local, close: async () => undefined };
}

/** Through a fleetlab cloud: the device API by its proxy, and the device's rows of its data API. */
function cloudAccess(options: CaptureCommandOptions): Access {
  const cloud = deviceUrl(options.cloud!, '--cloud');
  if (!options.cloudKey) throw usage("--cloud needs --cloud-key: a user's API key of that cloud (the proxy takes no device key)");
  if (!options.uuid) throw usage('--cloud needs --uuid: the device to capture');
  if (options.simDir || options.apiKey) throw usage('--sim-dir and --api-key go with --device: through --cloud the cloud reaches the device');
  return {
    api: proxiedApi(cloud, options.cloudKey, options.uuid),
    key: options.cloudKey,
    source: { kind: 'cloud', address: cloud, uuid: options.uuid },
    cloudRows: (redact) => readCloudRows(cloudReader(cloud, options.cloudKey!), options.uuid!, redact),
    close: async () => undefined,
  };
}

/**
 * A lab board: SSH as its config says, the key from the supervisor's store there unless given
 * (or in the config). Nothing on the board is changed: a capture never resets it.
 */
async function boardAccess(path: string, apiKey: string | undefined): Promise<Access> {
  const config = loadBoardConfig({ [BOARD_CONFIG_VARIABLE]: path, ...(process.env.HOME ? { HOME: process.env.HOME } : {}) });
  let privateKey: Buffer;
  try {
    privateKey = await readFile(config.privateKey);
  } catch (err) {
    throw usage(`board config ${path}: "privateKey": cannot read ${config.privateKey} (${errorText(err)})`);
  }
  const ssh = new SshDevice({ host: config.host, port: config.sshPort, username: config.user, privateKey });
  try {
    const stored = await storedIdentity(ssh, config.dataDir);
    const key = apiKey ?? config.apiKey ?? stored.deviceKey;
    return {
      api: httpApiAt(deviceUrl(config.apiUrl), key),
      key,
      source: { kind: 'ssh', address: `${config.user}@${config.host}:${config.sshPort}`, uuid: stored.uuid },
      exec: ssh.exec,
      paths: { dataDir: config.dataDir, lockRoot: config.lockRoot },
      close: () => ssh.close(),
    };
  } catch (err) {
    await ssh.close();
    throw err;
  }
}

export async function runCapture(options: CaptureCommandOptions): Promise<void> {
  const access = await accessOf(options);
  const out = options.out ?? defaultBundleName(new Date());
  if (options.redaction === 'none') options.log('warning: --no-redact: keys, passwords and every environment value go into the bundle as they are');
  const stop = new AbortController();
  const onInt = () => {
    options.log('stopping after this step (Ctrl-C again to stop at once, with no bundle)');
    stop.abort();
  };
  process.once('SIGINT', onInt);
  try {
    options.log(`capturing ${access.source.kind === 'api' ? '' : `${access.source.kind} `}${access.source.address}${access.source.uuid ? ` (device ${access.source.uuid})` : ''} into ${out}`);
    const manifest = await captureDevice({
      out,
      source: access.source,
      api: access.api,
      key: access.key,
      ...(access.exec ? { exec: access.exec } : {}),
      ...(access.paths ? { paths: access.paths } : {}),
      ...(access.cloudRows ? { cloudRows: access.cloudRows } : {}),
      redaction: options.redaction,
      ...(options.since ? { since: options.since } : {}),
      journalEntries: options.journalEntries ?? DEFAULT_JOURNAL_ENTRIES,
      ...(options.volumeBytes ? { volumeBytes: options.volumeBytes } : {}),
      fleetlab: fleetlabVersion(import.meta.url),
      force: options.force,
      signal: stop.signal,
      progress: options.log,
    });
    const failed = manifest.steps.filter((s) => s.status === 'failed').map((s) => s.name);
    options.log(`wrote ${out}: ${Object.keys(manifest.files).length} files${failed.length ? `; not captured: ${failed.join(', ')}` : ''}`);
    console.log(out);
    // The bundle is kept and says what it lacks; the exit status tells a script it is partial.
    if (!manifest.complete) throw new FleetlabError('HIL_ERR_CAPTURE', `${out} is incomplete: the capture stopped before its last step ('fleetlab bundle show ${out}' says where)`);
  } finally {
    process.off('SIGINT', onInt);
    await access.close();
  }
}

/**
 * Where a simulated device on this host keeps the supervisor's files (see SimDevice), from the
 * state directory `fleetlab sim device` prints.
 */
export function simDevicePaths(simDir: string): DevicePaths {
  const dir = resolve(simDir);
  const { engineSocket, dataDir, lockRoot } = simDeviceFiles(dir);
  const files = { dataDir, lockRoot };
  if (!existsSync(join(files.dataDir, 'device.json'))) {
    throw usage(`--sim-dir must be a simulated device's state directory (the "state:" line 'fleetlab sim device' prints), holding supervisor/device.json; ${dir} does not`);
  }
  return { ...files, ...(existsSync(engineSocket) ? { dockerHost: `unix://${engineSocket}` } : {}) };
}

/** `fleetlab bundle show`, and with `--html [out]` the bundle's device timeline page written next to it (or to `out`). */
export async function runBundleShow(path: string, options: { html?: string | true } = {}): Promise<void> {
  const bundle = await readBundle(path);
  if (options.html === undefined) return void process.stdout.write(showBundle(bundle));
  const out = options.html === true ? `${path}.timeline.html` : options.html;
  await writeFile(out, renderTimelineHtml(bundleTimeline(bundle)));
  process.stdout.write(`${out}: the device timeline of ${path} (open it in a browser)\n`);
}

/** `--volumes [bytes]`: the limit per volume; bare, 16 MiB. */
export function parseVolumeBytes(value: string | true): number {
  if (value === true) return 16 * 1024 * 1024;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 2 ** 40) throw usage(`--volumes takes the most bytes of one volume to capture, a positive integer, not ${JSON.stringify(value)}`);
  return n;
}

/** `--journal-entries` as a positive integer. */
export function parseJournalEntries(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 2 ** 31 - 1) throw usage(`--journal-entries must be a positive integer, not ${JSON.stringify(value)}`);
  return n;
}

export interface ReplayCommandOptions {
  bundle: string;
  port: number;
  dataDir?: string;
  engine: 'sim' | 'docker';
  dockerSocket: string;
  listenAddress: string;
  /** Write a spec that starts from the bundle to this file, instead of starting a device. */
  spec?: string;
  /** Start the supervisor stopped before its first line, for a debugger. */
  paused?: boolean;
  /** Also a local cloud seeded with the bundle's cloud rows, on this port (0: any). */
  cloudPort?: number;
  /** `sim` (default): a simulated device here; `container`, `qemu`: that HIL target's device. */
  target?: 'sim' | 'container' | 'qemu';
  force?: boolean;
}

/** `fleetlab replay`: the bundle's device on a fresh simulated device, until Ctrl-C; or, with `spec`, a spec that starts from it. */
export async function runReplay(options: ReplayCommandOptions): Promise<void> {
  if (options.spec) {
    if (options.cloudPort !== undefined) throw usage('--cloud goes with a replay, not with --spec');
    return writeReplaySpec(options.bundle, options.spec, options.force ?? false);
  }
  if (options.target && options.target !== 'sim') return replayOnTarget(options.target, options);
  const { replayOnSim } = await import('../capture/replay.js');
  const { serveSimDevice } = await import('../../sim/device.js');
  const log = (line: string) => console.error(`fleetlab replay: ${line}`);
  const inspectBrk = options.paused ? await freePort() : undefined;
  const { device, cloud } = await replayOnSim({
    bundle: options.bundle,
    port: options.port,
    ...(options.dataDir ? { dataDir: options.dataDir } : {}),
    engine: options.engine,
    dockerSocket: options.dockerSocket,
    listenAddress: options.listenAddress,
    ...(inspectBrk ? { inspectBrk } : {}),
    ...(options.cloudPort !== undefined ? { cloud: { port: options.cloudPort } } : {}),
    log,
  });
  const heading = inspectBrk
    ? `fleetlab: device ${device.info().uuid} replayed from ${options.bundle} is in the captured state; its supervisor is paused before its first line`
    : `fleetlab: device ${device.info().uuid} replayed from ${options.bundle} is up; its supervisor runs from the captured state`;
  try {
    await serveSimDevice(device, heading, [
      ...(inspectBrk ? [`  debugger:     attach to 127.0.0.1:${inspectBrk} (chrome://inspect, or VS Code "Attach to Node Process"); the supervisor runs when the debugger lets it go, and its API answers then`] : []),
      ...(cloud ? [`  cloud:        ${cloud.url}  (admin key: ${cloud.adminKey}; fleet ${cloud.fleet.name}, seeded from the bundle)`, `  try:          curl -H "Authorization: Bearer ${cloud.adminKey}" "${cloud.url}/v6/device?\\$select=uuid,is_online,is_running__release"`] : []),
      `  compare:      fleetlab bundle show ${options.bundle}`,
    ]);
  } finally {
    await cloud?.close();
  }
}

/**
 * The bundle's device on a HIL target's device (a container on this dockerd, the emulated
 * board), as a spec's `fromBundle` starts it, until Ctrl-C; then the target is let go.
 */
async function replayOnTarget(name: 'container' | 'qemu', options: ReplayCommandOptions): Promise<void> {
  const simOnly = [options.paused && '--paused', options.cloudPort !== undefined && '--cloud', options.dataDir && '--data-dir', options.port && '--port', options.engine !== 'sim' && '--engine'].filter(Boolean);
  if (simOnly.length) throw usage(`${simOnly.join(', ')} ${simOnly.length === 1 ? 'goes' : 'go'} with --target sim: the ${name} target makes its own device`);
  await readBundle(options.bundle); // a bad bundle is refused before a container or a board starts
  const { loadTarget } = await import('../targets/index.js');
  const { untilStopped } = await import('../../src/stop-signals.js');
  const driver = await loadTarget(name);
  console.error(`fleetlab replay: starting a ${name} device from ${options.bundle}${name === 'qemu' ? ' (the emulated board boots first: minutes)' : ''}`);
  let device;
  try {
    device = await driver.start({ bundle: resolve(options.bundle) });
  } catch (err) {
    await driver.dispose?.();
    throw err;
  }
  const { url, apiKey, uuid } = device.api.identity;
  process.stdout.write(`${JSON.stringify({ event: 'ready', target: name, url, apiKey, uuid })}\n`);
  process.stderr.write(
    [
      `fleetlab: device ${uuid} replayed from ${options.bundle} on the ${name} target is up; its supervisor runs from the captured state`,
      `  device API:   ${url}  (key: ${apiKey})`,
      `  try:          curl "${url}/v2/state/status?apikey=${apiKey}"`,
      `  compare:      fleetlab bundle show ${options.bundle}`,
      '  stop with Ctrl-C',
      '',
    ].join('\n'),
  );
  // Nothing of the device runs in this process: without a timer the process would end here.
  const alive = setInterval(() => undefined, 60_000);
  const stop = async () => {
    clearInterval(alive);
    await device.close();
    await driver.dispose?.();
  };
  await untilStopped(stop, { onSignal: () => process.stderr.write(`fleetlab: stopping the ${name} device (again to force)\n`) }).done;
}

async function writeReplaySpec(bundlePath: string, specPath: string, force: boolean): Promise<void> {
  const { replaySpec } = await import('../capture/replay-spec.js');
  const { capturedDevice } = await import('../capture/replay.js');
  const bundle = await readBundle(bundlePath);
  // The spec's device is this bundle's replay: refuse here what the replay would refuse there.
  capturedDevice(bundle, bundlePath);
  const spec = resolve(specPath);
  if (!/\.spec\.[cm]?[jt]s$/.test(spec)) throw usage(`--spec must name a spec file (*.spec.ts), not ${JSON.stringify(specPath)}`);
  if (existsSync(spec) && !force) throw usage(`${specPath} exists: pass --force to replace it`);
  // The bundle goes beside the spec (test results are wiped by the next run): the two are committed together.
  const beside = join(dirname(spec), `${basename(spec).replace(/\.spec\.[cm]?[jt]s$/, '')}.bundle.tar.gz`);
  mkdirSync(dirname(spec), { recursive: true });
  if (resolve(bundlePath) !== beside) {
    if (existsSync(beside) && !force) throw usage(`${relative(process.cwd(), beside)} exists: pass --force to replace it`);
    copyFileSync(resolve(bundlePath), beside);
  }
  writeFileSync(spec, replaySpec(bundle, `./${basename(beside)}`));
  console.error(`fleetlab replay: wrote ${specPath} and the bundle beside it, ${relative(process.cwd(), beside)}; the spec starts a sim device from it. Run it: npx fleetlab test ${basename(spec)}`);
  console.log(specPath);
}
