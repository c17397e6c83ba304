/**
 * `fleetlab sim stack` (what `npm start` runs): a fleetlab cloud on SQLite and one simulated
 * device registered to it, in one process. The cloud is created fresh in a data directory:
 * admin key, a fleet named "demo", a provisioning key; the device registers with that key
 * the way a board does on first boot.
 *
 * Every start is a fresh cloud and a fresh device, so nothing of a run outlives its stop:
 * every stop (a signal, a failed start, `stop()`) undoes the run in reverse order of start
 * (src/teardown.ts), and a run killed with -9 is reaped by the next start (./stack-runs.ts).
 */
import { rm } from 'node:fs/promises';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Docker from 'dockerode';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import type { Db } from '../src/cloud/db/port.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { buildCloud } from '../src/cloud/server.js';
import { FleetlabError, errorText } from '../src/errors.js';
import { killProcesses, sessionProcesses, stopProcesses } from '../src/processes.js';
import { untilStopped } from '../src/stop-signals.js';
import { Teardown } from '../src/teardown.js';
import { until } from '../src/wait.js';
import { SimDevice } from './device.js';
import { removeDeviceLeftovers, storedUuid } from './device-leftovers.js';
import { ensureTestImages } from './images/test-images.js';
import { openRun } from './stack-runs.js';

export interface StackOptions {
  devicePort: number;
  cloudPort: number;
  engine: 'docker' | 'sim';
  dockerSocket: string;
  pollIntervalMs: number;
  /** Where runs keep their state (see ./stack-runs.ts); each run's directory goes with its stop. */
  stateDir: string;
  /** The upstream supervisor version X.Y.Z the device answers as; default fleetlab's own. */
  supervisorVersion?: string;
}

export interface StackInfo {
  /** This run's directory (removed at stop). */
  stateDir: string;
  cloud: { url: string; adminKey: string; dataDir: string };
  fleet: { id: number; name: string };
  device: { url: string; apiKey: string; uuid: string; id: number; dataDir: string };
}

/** A fresh fleetlab cloud on SQLite, listening on 127.0.0.1, with its admin key. */
export interface LocalCloud {
  readonly url: string;
  readonly adminKey: string;
  readonly dataDir: string;
  /** Its database, for what the API does not offer (a replay's seeding with captured ids). */
  readonly db: Db;
  /** A call with the admin key; a non-2xx answer throws with its body. */
  call(method: string, path: string, body?: unknown): Promise<unknown>;
  close(): Promise<void>;
}

export interface FleetCloud extends LocalCloud {
  readonly fleet: { readonly id: number; readonly name: string };
  readonly provisioningKey: string;
}

/** A fresh fleetlab cloud on SQLite in `dataDir` (created), listening on 127.0.0.1:`port` (0: any free one). */
export async function startLocalCloud(opts: { port: number; dataDir: string; adminKey?: string }): Promise<LocalCloud> {
  mkdirSync(opts.dataDir, { recursive: true, mode: 0o700 });
  const db = openSqlite(join(opts.dataDir, 'cloud.db'));
  const app = buildCloud({ db, tunnelHeartbeatMs: 2_000, proxyTimeoutMs: 10_000 });
  const close = async () => {
    await app.close().catch(() => undefined);
    await db.close().catch(() => undefined);
  };
  try {
    const admin = await prepareDatabase(db, opts.adminKey ? { adminKey: opts.adminKey } : {});
    if (!admin.key) throw new FleetlabError('SUP_ERR_INTERNAL', `the cloud in ${opts.dataDir} has an admin already: pass its key`);
    const url = (await app.listen({ port: opts.port, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
    const adminKey = admin.key;
    const call = async (method: string, path: string, body?: unknown): Promise<unknown> => {
      const res = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${adminKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      if (!res.ok) throw new FleetlabError('SUP_ERR_INTERNAL', `cloud ${method} ${path} answered ${res.status}: ${text}`);
      try {
        return text ? JSON.parse(text) : undefined;
      } catch {
        return text;
      }
    };
    return { url, adminKey, dataDir: opts.dataDir, db, call, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** The id of the organization a fresh cloud's admin owns. */
export async function adminOrganization(cloud: Pick<LocalCloud, 'call'>): Promise<number> {
  const orgs = (await cloud.call('GET', `/v6/organization?$filter=handle eq 'admin'`)) as { d: Array<{ id: number }> };
  return orgs.d[0]!.id;
}

/**
 * A fresh fleetlab cloud on SQLite in `dataDir`, listening on 127.0.0.1, with one fleet and
 * a provisioning key for it: what a lab (npm start, the HIL suite) gives its devices.
 */
export async function startFleetCloud(opts: { port: number; dataDir: string; fleetName: string }): Promise<FleetCloud> {
  const cloud = await startLocalCloud(opts);
  try {
    const fleet = (await cloud.call('POST', '/v6/application', { app_name: opts.fleetName, organization: await adminOrganization(cloud), device_type: 'raspberrypi3' })) as { id: number };
    const provisioningKey = (await cloud.call('POST', `/api-key/application/${fleet.id}/provisioning`, { name: opts.fleetName })) as string;
    return { ...cloud, fleet: { id: fleet.id, name: opts.fleetName }, provisioningKey };
  } catch (err) {
    await cloud.close();
    throw err;
  }
}

export interface RunningStack extends StackInfo {
  /** Undoes the run: everything it started, last started first, each awaited. */
  stop(): Promise<void>;
  /** A forced stop: kills its processes at once; a `stop` under way still removes what it can. */
  kill(): void;
}

const REGISTER_TIMEOUT_MS = 30_000;
const REGISTER_POLL_MS = 250;

/** A stop asked for while the stack was starting: the start gives up at its next step. */
function checkNotStopping(teardown: Teardown, signal: AbortSignal | undefined): void {
  if (signal?.aborted || teardown.stopping) throw new FleetlabError('SUP_ERR_INTERNAL', 'the stack was stopped while it was starting');
}

/**
 * Starts a run: reaps what runs killed before their stop left in `opts.stateDir`, then the
 * cloud and the device. Everything started goes on `teardown` (a new one by default), which a
 * failed start unwinds before rethrowing; `signal` cuts a start short between its steps.
 */
export async function startStack(opts: StackOptions, teardown = new Teardown(), signal?: AbortSignal): Promise<RunningStack> {
  let supervisorLog: string | undefined;
  try {
    const { run, reaped } = await openRun(opts.stateDir, opts.engine === 'docker' ? { dockerSocket: opts.dockerSocket } : {});
    if (reaped.length > 0) process.stderr.write(`fleetlab: stopped and removed what a stack killed before its stop left: ${reaped.join(', ')}\n`);
    teardown.defer({ name: `the run's directory ${run.dir}`, stop: () => rm(run.dir, { recursive: true, force: true }) });
    // The device stops its own processes; this also reaches those of a device still starting.
    teardown.defer({
      name: `processes labelled ${run.session}`,
      stop: async () => void (await stopProcesses(sessionProcesses(run.session))),
      kill: () => killProcesses(sessionProcesses(run.session)),
    });
    checkNotStopping(teardown, signal);
    // The test images are a cache every start and the tests share: imported once, they stay.
    if (opts.engine === 'docker') await ensureTestImages(opts.dockerSocket);
    checkNotStopping(teardown, signal);
    const cloud = await startFleetCloud({ port: opts.cloudPort, dataDir: join(run.dir, 'cloud'), fleetName: 'demo' });
    teardown.defer({ name: 'the cloud', stop: () => cloud.close() });
    checkNotStopping(teardown, signal);
    const deviceDir = join(run.dir, 'device');
    supervisorLog = join(deviceDir, 'supervisor.log');
    // Its volumes too: the device's uuid is never used again, so their data could never be reached.
    if (opts.engine === 'docker') {
      teardown.defer({
        name: "the device's containers, networks and volumes",
        stop: async () => {
          const uuid = storedUuid(deviceDir);
          if (uuid) await removeDeviceLeftovers(new Docker({ socketPath: opts.dockerSocket }), uuid);
        },
      });
    }
    const device = await SimDevice.start({
      port: opts.devicePort,
      dataDir: deviceDir,
      engine: opts.engine,
      dockerSocket: opts.dockerSocket,
      localMode: false,
      session: run.session,
      ...(opts.supervisorVersion ? { supervisorVersion: opts.supervisorVersion } : {}),
      cloud: { url: cloud.url, provisioningKey: cloud.provisioningKey, pollIntervalMs: opts.pollIntervalMs, reportIntervalMs: 1000 },
    });
    teardown.defer({ name: 'the simulated device', stop: () => device.stop(), kill: () => device.kill() });
    const info = device.info();
    // Registration is the device's first act; wait for it so the printed fleet holds the device.
    const registered = async () => {
      checkNotStopping(teardown, signal);
      const rows = (await cloud.call('GET', `/v6/device?$select=id&$filter=uuid eq '${info.uuid}'`)) as { d: Array<{ id: number }> };
      return rows.d[0]?.id;
    };
    const deviceId = (await until('the device registers', registered, (id) => id !== undefined, {
      timeoutMs: REGISTER_TIMEOUT_MS,
      intervalMs: REGISTER_POLL_MS,
      // A stop asked for, or the in-process cloud failing, is not cured by asking again.
      stopOn: () => true,
      fail: (f) => (f.end === 'timeout' ? new FleetlabError('SUP_ERR_INTERNAL', `the device did not register within ${REGISTER_TIMEOUT_MS / 1000} s`) : undefined),
    }))!;
    return {
      stateDir: run.dir,
      cloud: { url: cloud.url, adminKey: cloud.adminKey, dataDir: cloud.dataDir },
      fleet: cloud.fleet,
      device: { url: info.url, apiKey: info.apiKey, uuid: info.uuid, id: deviceId, dataDir: info.dataDir },
      stop: () => teardown.stop(),
      kill: () => teardown.force(),
    };
  } catch (err) {
    // The run's directory goes with the unwind, and the supervisor's log with it: keep its tail.
    const tail = signal?.aborted || !supervisorLog ? '' : logTail(supervisorLog);
    // The start's own error says what went wrong; a failure to undo it would only hide it.
    await teardown.stop().catch(() => undefined);
    if (!tail) throw err;
    throw new FleetlabError('SUP_ERR_INTERNAL', `${errorText(err)}\nthe supervisor's last lines:\n${tail}`, { cause: err });
  }
}

const LOG_TAIL_LINES = 10;

function logTail(path: string): string {
  try {
    return readFileSync(path, 'utf8').trim().split('\n').slice(-LOG_TAIL_LINES).join('\n');
  } catch {
    return '';
  }
}

/** Prints the ready line and how to use the stack, then runs until a signal. */
export async function runStack(opts: StackOptions): Promise<void> {
  // Handlers first: a parent that stops us as soon as it reads the ready line gets a clean stop.
  const teardown = new Teardown();
  const aborted = new AbortController();
  let starting: Promise<unknown> = Promise.resolve();
  const { done } = untilStopped(
    async () => {
      aborted.abort();
      // A start under way gives up at its next step and unwinds what it started so far; the
      // unwind waits for it, so nothing started meanwhile escapes it.
      await starting.catch(() => undefined);
      await teardown.stop();
    },
    {
      force: () => {
        process.stderr.write('fleetlab: forcing: killing what is left, removing what can be removed\n');
        teardown.force();
      },
      onSignal: () => process.stderr.write('fleetlab: stopping the stack (Ctrl-C again to force)\n'),
    },
  );
  const start = startStack(opts, teardown, aborted.signal);
  starting = start;
  let stack: RunningStack;
  try {
    stack = await start;
  } catch (err) {
    if (aborted.signal.aborted) return done;
    throw err;
  }
  if (aborted.signal.aborted) return done;
  const { cloud, fleet, device, stateDir } = stack;
  process.stdout.write(`${JSON.stringify({ event: 'ready', stateDir, cloud, fleet, device })}\n`);
  const image = opts.engine === 'sim' ? 'fleetlab/test-app:1 (pulled from the simulated registry)' : 'fleetlab/test-app:1 (built locally)';
  process.stderr.write(
    [
      '',
      `fleetlab: cloud ${cloud.url} with fleet "${fleet.name}" (id ${fleet.id}); simulated device ${device.uuid} registered to it`,
      `  cloud API:     ${cloud.url}/v6/device   (Authorization: Bearer ${cloud.adminKey})`,
      `  device API:    ${device.url}/v1/device?apikey=${device.apiKey}`,
      `  engine:        ${opts.engine}; state in ${stateDir} (removed at stop)`,
      '',
      `  deploy a release of ${image}:`,
      `    K=${cloud.adminKey}; C=${cloud.url}`,
      `    curl -s -X POST $C/v6/service -H "Authorization: Bearer $K" -H 'Content-Type: application/json' -d '{"application":${fleet.id},"service_name":"main"}'`,
      `    curl -s -X POST $C/v6/image -H "Authorization: Bearer $K" -H 'Content-Type: application/json' -d '{"is_a_build_of__service":1,"is_stored_at__image_location":"fleetlab/test-app:1","status":"success"}'`,
      `    curl -s -X POST $C/v6/release -H "Authorization: Bearer $K" -H 'Content-Type: application/json' -d '{"belongs_to__application":${fleet.id},"commit":"c1","status":"success"}'`,
      `    curl -s -X POST $C/v6/release_image -H "Authorization: Bearer $K" -H 'Content-Type: application/json' -d '{"image":1,"is_part_of__release":1}'`,
      `    curl -s -X PATCH "$C/v6/application(${fleet.id})" -H "Authorization: Bearer $K" -H 'Content-Type: application/json' -d '{"should_be_running__release":1}'`,
      `    curl -s -X POST $C/supervisor/v1/update -H "Authorization: Bearer $K" -H 'Content-Type: application/json' -d '{"uuid":"${device.uuid}"}'`,
      `    curl -s "$C/v6/device(${device.id})?\\$select=status,is_online,is_running__release" -H "Authorization: Bearer $K"`,
      '  stop with Ctrl-C: stops the device, removes its containers, networks and volumes, and this state; Ctrl-C again forces',
      '',
    ].join('\n'),
  );
  await done;
}
