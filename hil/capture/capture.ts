/**
 * `fleetlab capture`: reads what a device shows into a bundle (bundle.ts), each piece a step
 * that may fail on its own (a device without a cloud has no tags; a capture without a shell
 * has no dmesg) and is recorded as such. What goes through the device API always; what needs
 * a shell on the device only with one (`exec`, a board or the qemu target over SSH).
 *
 * A device that stops answering half way (the connection fails, not an HTTP error) ends the
 * capture: the bundle keeps what was read and says it is incomplete. So does `signal`.
 */
import type { ApiProtocol, CommandProtocol, DevicePaths, HttpResponse, RequestOptions } from '../../device-access/protocols.js';
import { errorText, FleetlabError } from '../../src/errors.js';
import { BundleWriter, type BundleManifest, type BundleSource, type Redaction } from './bundle.js';
import { redactJson, redactText, type RedactOptions } from './redact.js';
import type { CloudRows } from './cloud-access.js';
import { join } from 'node:path';
import { LABEL } from '../../src/protocol/engine-labels.js';

export interface CaptureOptions {
  out: string;
  source: BundleSource;
  /** The device API; the key it sends is one of the secrets kept out of the bundle. */
  api: Pick<ApiProtocol, 'request'>;
  /** The key the capture authenticates with. */
  key: string;
  /** A shell on the device, when the capture has one. */
  exec?: CommandProtocol;
  /** Where the supervisor keeps its files on the device (read with `exec`), and its engine. */
  paths?: DevicePaths;
  /** The device's rows in the cloud it was reached through (`--cloud`), redacted as told. */
  cloudRows?: (redact: RedactOptions) => Promise<CloudRows>;
  redaction: Redaction;
  /** The journal from this time on (journalctl's formats); default all of it, up to `journalEntries`. */
  since?: string;
  /** The most journal entries kept (the newest). */
  journalEntries?: number;
  /**
   * Also the contents of the device's volumes, each up to this many bytes (a bigger one is
   * recorded as not captured). Off by default: what an app keeps in its volumes is not
   * redacted.
   */
  volumeBytes?: number;
  fleetlab: string;
  force?: boolean;
  signal?: AbortSignal;
  progress?: (line: string) => void;
}

export const DEFAULT_JOURNAL_ENTRIES = 20_000;

/** The connection to the device failed: later steps would fail the same way. */
class DeviceGone extends Error {}

const NO_SHELL = 'needs a shell on the device; this capture has only its API';

export async function captureDevice(options: CaptureOptions): Promise<BundleManifest> {
  const progress = options.progress ?? (() => undefined);
  await preflight(options);
  const started = new Map<string, number>();
  const writer = await BundleWriter.open(options.out, {
    source: options.source,
    redaction: options.redaction,
    fleetlab: options.fleetlab,
    ...(options.force ? { force: true } : {}),
    onStep: ({ name, phase, error }) => {
      if (phase === 'start') started.set(name, Date.now());
      else progress(`${name}: ${phase === 'ok' ? 'ok' : `failed: ${error}`} (${Date.now() - (started.get(name) ?? Date.now())} ms)`);
    },
  });
  // The store's keys join the secrets once it is read: later steps (the journal) cut them out too.
  const redact: RedactOptions = { policy: options.redaction, secrets: [options.key] };
  let uuid = options.source.uuid;
  let targetImages: string[] = [];
  let gone: string | undefined;

  const getJson = async (path: string): Promise<unknown> => (await answered(options.api, 'GET', path)).json();
  const putJson = (put: (file: string, data: string) => Promise<void>, file: string, value: unknown) =>
    put(file, `${JSON.stringify(redactJson(value, redact), null, 2)}\n`);
  // Steps that need a shell say so before anything else they lack.
  const needShell = () => {
    if (!options.exec) throw new Error(NO_SHELL);
  };
  const shell: Shell = async (argv) => {
    needShell();
    return shellOn(options.exec!)(argv);
  };

  // Read by the engine step: undefined when it could not run.
  let volumes: Array<{ Name: string; Mountpoint?: string }> | undefined;
  const steps: Array<[string, (put: Put) => Promise<void>]> = [
    ['supervisor', async (put) => putJson(put, 'supervisor/version.json', await getJson('/v2/version'))],
    ['device', async (put) => {
      await putJson(put, 'device/device.json', await getJson('/v1/device'));
      await putJson(put, 'device/name.json', await getJson('/v2/device/name'));
    }],
    ['store', async (put) => {
      needShell();
      const store = JSON.parse(await shell(['cat', join(required(options.paths?.dataDir, 'dataDir'), 'device.json')])) as Record<string, unknown>;
      redact.secrets = [...redact.secrets, ...storeSecrets(store)];
      if (typeof store.uuid === 'string') uuid = store.uuid;
      targetImages = imagesOfTargets(store);
      await putJson(put, 'supervisor/store.json', store);
    }],
    ['locks', async (put) => {
      needShell();
      await putJson(put, 'supervisor/locks.json', await lockFiles(shell, required(options.paths?.lockRoot, 'lockRoot')));
    }],
    ['engine', async (put) => {
      needShell();
      if (!uuid) throw new Error("needs the device's uuid, from its store or the source");
      const engineShell = options.paths?.engineShell;
      const docker = engineShell ? shellOn(engineShell) : shell;
      const engine = await engineObjects(docker, options.paths?.dockerHost, uuid, targetImages);
      volumes = engine.volumes as typeof volumes;
      for (const [name, value] of Object.entries(engine)) await putJson(put, `engine/${name}.json`, value);
    }],
    ...(options.volumeBytes ? [volumeStep(() => volumes, options.paths?.engineShell ? shellOn(options.paths.engineShell) : shell, options.volumeBytes)] : []),
    ['state', async (put) => {
      await putJson(put, 'state/status.json', await getJson('/v2/state/status'));
      await putJson(put, 'state/applications.json', await getJson('/v2/applications/state'));
      await putJson(put, 'state/container-ids.json', await getJson('/v2/containerId'));
    }],
    // Answered only in local mode (a 400 otherwise, kept as the reason).
    ['local-target', async (put) => putJson(put, 'state/local-target.json', await getJson('/v2/local/target-state'))],
    ['host-config', async (put) => putJson(put, 'host/config.json', await getJson('/v1/device/host-config'))],
    // The device reads its tags from the cloud: without one this fails, saying so.
    ['tags', async (put) => putJson(put, 'device/tags.json', await getJson('/v2/device/tags'))],
    ...(options.cloudRows ? [cloudStep(options.cloudRows, redact)] : []),
    ['journal', async (put) => put('journal/journal.jsonl', await journal(options, redact))],
    ['dmesg', async (put) => put('host/dmesg.txt', redactText(await shell(['dmesg']), redact))],
    ['clock', async (put) => {
      const asked = Date.now();
      const text = await shell(['sh', '-c', 'date -u +%Y-%m-%dT%H:%M:%S.%NZ; cat /proc/uptime']);
      await put('host/clock.txt', text);
      await putJson(put, 'host/clock.json', clockReading(text, asked, Date.now()));
    }],
    ['disk', async (put) => put('host/df.txt', await shell(['df', '-P']))],
    ['network', async (put) => {
      await put('host/addresses.json', await shell(['ip', '-j', 'address']));
      await put('host/routes.json', await shell(['ip', '-j', 'route']));
      await put('host/resolv.conf', await shell(['cat', '/etc/resolv.conf']));
    }],
  ];

  for (const [name, run] of steps) {
    if (options.signal?.aborted) {
      gone = 'the capture was stopped';
      break;
    }
    await writer.step(name, async (put) => {
      try {
        await run(put);
      } catch (err) {
        if (err instanceof DeviceGone) gone = `the device stopped answering during "${name}": ${err.message}`;
        throw err;
      }
    });
    if (gone) break;
  }
  if (gone) progress(`incomplete: ${gone}; the bundle keeps what was read before`);
  return writer.finish({ complete: gone === undefined });
}

/**
 * Before any file is written: a device that is not there, or refuses the key, gets an error
 * that says so rather than a bundle of failed steps.
 */
async function preflight(options: CaptureOptions): Promise<void> {
  let res: HttpResponse;
  try {
    res = await options.api.request('GET', '/v1/device', { timeoutMs: 15_000 });
  } catch (err) {
    throw new FleetlabError('HIL_ERR_CAPTURE', `cannot reach the device: ${errorText(err)}`);
  }
  if (res.status === 401) throw new FleetlabError('HIL_ERR_CAPTURE', "the device refused the key (401): pass the device's key");
  if (res.status !== 200) throw new FleetlabError('HIL_ERR_CAPTURE', `the device answered GET /v1/device with ${res.status}: ${res.text.slice(0, 300)}`);
}

/**
 * A 2xx answer, or the step's error in the device's words. A request that got no answer at
 * all means the device is gone.
 */
async function answered(api: CaptureOptions['api'], method: string, path: string, requestOptions: RequestOptions = {}): Promise<HttpResponse> {
  let res: HttpResponse;
  try {
    res = await api.request(method, path, requestOptions);
  } catch (err) {
    throw new DeviceGone(errorText(err));
  }
  if (res.status < 200 || res.status > 299) throw new Error(`${method} ${path}: ${res.status} ${res.text.slice(0, 300)}`);
  return res;
}

/** The journal as JSON lines, newest `journalEntries`, each entry redacted. */
async function journal(options: CaptureOptions, redact: RedactOptions): Promise<string> {
  const body = { format: 'json', count: options.journalEntries ?? DEFAULT_JOURNAL_ENTRIES, ...(options.since ? { since: options.since } : {}) };
  const res = await answered(options.api, 'POST', '/v2/journal-logs', { body, timeoutMs: 120_000 });
  const lines = res.text.split('\n').filter((line) => line.length > 0);
  const redacted = lines.map((line) => {
    try {
      return JSON.stringify(redactJson(JSON.parse(line) as unknown, redact));
    } catch {
      return JSON.stringify({ MESSAGE: redactText(line, redact) });
    }
  });
  return redacted.map((line) => `${line}\n`).join('');
}

type Shell = (argv: string[]) => Promise<string>;
type Put = (file: string, data: string | Buffer) => Promise<void>;

/** What `volumes/index.json` says of each volume of the device. */
export interface CapturedVolume {
  name: string;
  bytes: number;
  /** The archive in the bundle (`volumes/<name>.tar.gz`); absent when not captured. */
  file?: string;
  /** Why it was not captured. */
  skipped?: string;
}

/**
 * The contents of each volume as a tar.gz, read where the engine keeps it (the shell that sees
 * the engine's storage: the device's, or the harness's for an engine it shares). Through a
 * text channel, so base64.
 */
function volumeStep(list: () => Array<{ Name: string; Mountpoint?: string }> | undefined, shell: Shell, limit: number): [string, (put: Put) => Promise<void>] {
  return ['volumes', async (put) => {
    const volumes = list();
    if (!volumes) throw new Error("needs the device's volumes from the engine step, which failed");
    const index: CapturedVolume[] = [];
    for (const v of volumes) {
      if (!v.Mountpoint) {
        index.push({ name: v.Name, bytes: 0, skipped: 'the engine gives no mount point' });
        continue;
      }
      const bytes = Number((await shell(['du', '-sb', v.Mountpoint])).split(/\s/)[0]);
      if (!(bytes <= limit)) {
        index.push({ name: v.Name, bytes, skipped: `${bytes} bytes, over the limit of ${limit}` });
        continue;
      }
      const archive = Buffer.from(await shell(['sh', '-c', 'tar -C "$1" -czf - . | base64 -w0', 'sh', v.Mountpoint]), 'base64');
      const file = `volumes/${v.Name}.tar.gz`;
      await put(file, archive);
      index.push({ name: v.Name, bytes, file });
    }
    await put('volumes/index.json', `${JSON.stringify(index, null, 2)}\n`);
  }];
}

/** The device's cloud rows, one file each. */
function cloudStep(read: NonNullable<CaptureOptions['cloudRows']>, redact: RedactOptions): [string, (put: Put) => Promise<void>] {
  return ['cloud', async (put) => {
    const rows = await read(redact);
    const files: Record<keyof CloudRows, string> = { device: 'device', tags: 'tags', deviceVariables: 'device-variables', fleet: 'fleet', fleetVariables: 'fleet-variables', release: 'release' };
    for (const [key, file] of Object.entries(files) as Array<[keyof CloudRows, string]>) {
      if (rows[key] !== undefined) await put(`cloud/${file}.json`, `${JSON.stringify(rows[key], null, 2)}\n`);
    }
  }];
}

export interface ClockReading {
  /** What the device's clock said. */
  device: string;
  /** This host's clock half way through the reading. */
  capturedAt: string;
  /** The device's clock minus this host's (to the reading's round trip). */
  offsetMs: number;
  roundTripMs: number;
}

/** The device's `date` against this host's clock around it: how far off the device's clock was. */
export function clockReading(dateOutput: string, askedAt: number, answeredAt: number): ClockReading {
  const line = dateOutput.split('\n')[0]!.trim();
  // date prints nanoseconds; a Date holds milliseconds.
  const device = Date.parse(line.replace(/(\.\d{3})\d*Z$/, '$1Z'));
  if (Number.isNaN(device)) throw new Error(`the device's date printed ${JSON.stringify(line)}, not a time`);
  const mid = askedAt + (answeredAt - askedAt) / 2;
  return { device: new Date(device).toISOString(), capturedAt: new Date(mid).toISOString(), offsetMs: Math.round(device - mid), roundTripMs: answeredAt - askedAt };
}

/** Runs argv there: its stdout, or an error with its exit status and stderr. */
const shellOn = (exec: CommandProtocol): Shell => async (argv) => {
  const result = await exec.run(argv, { timeoutMs: 30_000 });
  if (result.exitCode === 127) throw new Error(`${argv[0]} is not installed where it runs (exit 127)${argv[0] === 'docker' ? ': install the docker CLI (Debian: docker.io)' : ''}`);
  if (result.exitCode !== 0) throw new Error(`${argv.join(' ')} exited ${result.exitCode}: ${result.stderr.trim().slice(0, 300)}`);
  return result.stdout;
};

/** The images the stored targets (local and cloud) name. */
function imagesOfTargets(store: Record<string, unknown>): string[] {
  const images = new Set<string>();
  for (const target of [store.localTarget, store.cloudTarget] as Array<{ apps?: Array<{ services?: Array<{ image?: unknown }> }> } | null>) {
    for (const app of target?.apps ?? []) for (const service of app.services ?? []) if (typeof service.image === 'string') images.add(service.image);
  }
  return [...images];
}

function required(value: string | undefined, what: string): string {
  if (!value) throw new Error(`needs the supervisor's ${what} on the device; this capture was not told it`);
  return value;
}

/** Every key the store holds, to cut out wherever else it shows (a URL in the journal). */
function storeSecrets(store: Record<string, unknown>): string[] {
  const appKeys = store.appKeys && typeof store.appKeys === 'object' ? Object.values(store.appKeys) : [];
  return [store.deviceKey, store.cloudKey, ...appKeys].filter((v): v is string => typeof v === 'string' && v.length > 0);
}

export interface CapturedLocks {
  root: string;
  /** Each lock file on disk, relative to the root (`<app>/<service>/updates.lock`), with what it holds. */
  files: Array<{ path: string; content: string }>;
}

async function lockFiles(shell: Shell, root: string): Promise<CapturedLocks> {
  // NUL-separated: a service name may hold any character but / and NUL.
  const listed = await shell(['find', root, '-name', 'updates.lock', '-type', 'f', '-print0']);
  const files = [];
  for (const file of listed.split('\0').filter(Boolean)) {
    files.push({ path: file.slice(root.length).replace(/^\/+/, ''), content: await shell(['cat', file]) });
  }
  return { root, files };
}

/**
 * What the device's engine holds for the device, as `docker inspect` shows it: its containers,
 * volumes and networks (by the device label), and the images those containers run or its
 * target names (those the engine lacks listed as missing).
 */
async function engineObjects(shell: Shell, host: string | undefined, uuid: string, targetImages: string[]): Promise<Record<string, unknown>> {
  const docker = (...args: string[]) => shell(['docker', ...(host ? ['-H', host] : []), ...args]);
  const filter = `label=${LABEL.device}=${uuid}`;
  const inspectAll = async (kind: string[], ids: string[]) => (ids.length ? (JSON.parse(await docker(...kind, 'inspect', ...ids)) as unknown[]) : []);
  const lines = (text: string) => text.split('\n').map((l) => l.trim()).filter(Boolean);
  // The apps' containers: a simulated device's host-network container (sim/host-network.ts) has the device label but no app, and its replay makes its own.
  const containers = await inspectAll([], lines(await docker('ps', '-aq', '--no-trunc', '--filter', filter, '--filter', `label=${LABEL.appId}`))) as Array<{ Image?: string; Config?: { Image?: string } }>;
  const volumes = await inspectAll(['volume'], lines(await docker('volume', 'ls', '-q', '--filter', filter)));
  const networks = await inspectAll(['network'], lines(await docker('network', 'ls', '-q', '--no-trunc', '--filter', filter)));
  // An update's images may be downloaded before any container runs them: those count too.
  const refs = new Set<string>(targetImages);
  for (const c of containers) if (c.Image) refs.add(c.Image);
  const images = new Map<string, unknown>();
  const missing: string[] = [];
  for (const ref of refs) {
    const found = await docker('image', 'inspect', ref).then((out) => JSON.parse(out) as Array<{ Id: string }>, () => undefined);
    if (found) for (const image of found) images.set(image.Id, image);
    else missing.push(ref);
  }
  return { containers, volumes, networks, images: { present: [...images.values()], missing } };
}
