/**
 * `fleetlab capture` and `fleetlab bundle show` from the command line: flags in, a bundle
 * (or its summary) out, progress on stderr. Ctrl-C ends the capture after the step it is in,
 * with the bundle marked incomplete; a second Ctrl-C stops at once (no bundle at `--out`).
 */
import { FleetlabError } from '../../src/errors.js';
import { fleetlabVersion } from '../../src/package-root.js';
import { httpApi } from '../lib/http.js';
import { readBundle, type Redaction } from './bundle.js';
import { captureDevice, DEFAULT_JOURNAL_ENTRIES } from './capture.js';
import type { DevicePaths } from '../targets/protocols.js';
import { hostShell } from '../targets/host-shell.js';
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { showBundle } from './show.js';

export interface CaptureCommandOptions {
  device: string;
  apiKey: string;
  /** A simulated device's state directory on this host: the capture gets a shell and its paths. */
  simDir?: string;
  out?: string;
  since?: string;
  journalEntries?: number;
  redaction: Redaction;
  force: boolean;
  log: (line: string) => void;
}

const usage = (message: string) => new FleetlabError('HIL_ERR_CAPTURE', message);

/** The device API's base URL, checked: http(s), no path, no credentials in it. */
export function deviceUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw usage(`--device must be the device API's URL, such as http://127.0.0.1:48484, not ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw usage(`--device must be an http:// or https:// URL, not ${JSON.stringify(value)}`);
  if (url.username || url.password) throw usage('--device must not carry credentials: pass the key with --api-key');
  return url.origin;
}

export const defaultBundleName = (now: Date) => `fleetlab-capture-${now.toISOString().replace(/[:.]/g, '-')}.tar.gz`;

export async function runCapture(options: CaptureCommandOptions): Promise<void> {
  const url = deviceUrl(options.device);
  const out = options.out ?? defaultBundleName(new Date());
  if (options.redaction === 'none') options.log('warning: --no-redact: keys, passwords and every environment value go into the bundle as they are');
  const api = httpApi({ url, apiKey: options.apiKey, uuid: '', vendor: '', lockRoot: '' });
  const local = options.simDir ? { exec: hostShell, paths: simDevicePaths(options.simDir) } : {};
  const stop = new AbortController();
  const onInt = () => {
    options.log('stopping after this step (Ctrl-C again to stop at once, with no bundle)');
    stop.abort();
  };
  process.once('SIGINT', onInt);
  try {
    options.log(`capturing ${url} into ${out}`);
    const manifest = await captureDevice({
      out,
      source: { kind: 'api', address: url },
      api,
      key: options.apiKey,
      ...local,
      redaction: options.redaction,
      ...(options.since ? { since: options.since } : {}),
      journalEntries: options.journalEntries ?? DEFAULT_JOURNAL_ENTRIES,
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
  }
}

/**
 * Where a simulated device on this host keeps the supervisor's files (see SimDevice), from the
 * state directory `fleetlab sim device` prints.
 */
export function simDevicePaths(simDir: string): DevicePaths {
  const dir = resolve(simDir);
  if (!existsSync(join(dir, 'supervisor', 'device.json'))) {
    throw usage(`--sim-dir must be a simulated device's state directory (the "state:" line 'fleetlab sim device' prints), holding supervisor/device.json; ${dir} does not`);
  }
  const engineSocket = join(dir, 'engine', 'engine.sock');
  return {
    dataDir: join(dir, 'supervisor'),
    lockRoot: join(dir, 'locks'),
    ...(existsSync(engineSocket) ? { dockerHost: `unix://${engineSocket}` } : {}),
  };
}

export async function runBundleShow(path: string): Promise<void> {
  process.stdout.write(showBundle(await readBundle(path)));
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
  force?: boolean;
}

/** `fleetlab replay`: the bundle's device on a fresh simulated device, until Ctrl-C; or, with `spec`, a spec that starts from it. */
export async function runReplay(options: ReplayCommandOptions): Promise<void> {
  if (options.spec) return writeReplaySpec(options.bundle, options.spec, options.force ?? false);
  const { replayOnSim } = await import('./replay.js');
  const { serveSimDevice } = await import('../../sim/device.js');
  const log = (line: string) => console.error(`fleetlab replay: ${line}`);
  const { device } = await replayOnSim({
    bundle: options.bundle,
    port: options.port,
    ...(options.dataDir ? { dataDir: options.dataDir } : {}),
    engine: options.engine,
    dockerSocket: options.dockerSocket,
    listenAddress: options.listenAddress,
    log,
  });
  await serveSimDevice(device, `fleetlab: device ${device.info().uuid} replayed from ${options.bundle} is up; its supervisor runs from the captured state`, [
    `  compare:      fleetlab bundle show ${options.bundle}`,
  ]);
}

async function writeReplaySpec(bundlePath: string, specPath: string, force: boolean): Promise<void> {
  const { replaySpec } = await import('./replay-spec.js');
  const { capturedDevice } = await import('./replay.js');
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
