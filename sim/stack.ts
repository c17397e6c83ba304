/**
 * `fleetlab sim stack` (what `npm start` runs): a fleetlab cloud on SQLite and one simulated
 * device registered to it, in one process. The cloud is created fresh in a data directory:
 * admin key, a fleet named "demo", a provisioning key; the device registers with that key
 * the way a board does on first boot.
 */
import { mkdtemp } from 'node:fs/promises';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { openSqlite } from '../src/cloud/db/sqlite.js';
import { buildCloud } from '../src/cloud/server.js';
import { FleetlabError } from '../src/errors.js';
import { untilStopped } from '../src/stop-signals.js';
import { SimDevice } from './device.js';
import { buildTestImages } from './images/test-images.js';

export interface StackOptions {
  devicePort: number;
  cloudPort: number;
  engine: 'docker' | 'sim';
  dockerSocket: string;
  pollIntervalMs: number;
}

export interface StackInfo {
  cloud: { url: string; adminKey: string; dataDir: string };
  fleet: { id: number; name: string };
  device: { url: string; apiKey: string; uuid: string; id: number; dataDir: string };
}

export interface FleetCloud {
  readonly url: string;
  readonly adminKey: string;
  readonly dataDir: string;
  readonly fleet: { readonly id: number; readonly name: string };
  readonly provisioningKey: string;
  /** A call with the admin key; a non-2xx answer throws with its body. */
  call(method: string, path: string, body?: unknown): Promise<unknown>;
  close(): Promise<void>;
}

/**
 * A fresh fleetlab cloud on SQLite in `dataDir`, listening on 127.0.0.1, with one fleet and
 * a provisioning key for it: what a lab (npm start, the HIL suite) gives its devices.
 */
export async function startFleetCloud(opts: { port: number; dataDir: string; fleetName: string }): Promise<FleetCloud> {
  mkdirSync(opts.dataDir, { recursive: true, mode: 0o700 });
  const db = openSqlite(join(opts.dataDir, 'cloud.db'));
  const app = buildCloud({ db, tunnelHeartbeatMs: 2_000, proxyTimeoutMs: 10_000 });
  const close = async () => {
    await app.close().catch(() => undefined);
    await db.close().catch(() => undefined);
  };
  try {
    const admin = await prepareDatabase(db);
    const url = (await app.listen({ port: opts.port, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
    const adminKey = admin.key!;
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
    const orgs = (await call('GET', `/v6/organization?$filter=handle eq 'admin'`)) as { d: Array<{ id: number }> };
    const fleet = (await call('POST', '/v6/application', { app_name: opts.fleetName, organization: orgs.d[0]!.id, device_type: 'raspberrypi3' })) as { id: number };
    const provisioningKey = (await call('POST', `/api-key/application/${fleet.id}/provisioning`, { name: opts.fleetName })) as string;
    return { url, adminKey, dataDir: opts.dataDir, fleet: { id: fleet.id, name: opts.fleetName }, provisioningKey, call, close };
  } catch (err) {
    await close();
    throw err;
  }
}

export interface RunningStack extends StackInfo {
  stop(): Promise<void>;
}

export async function startStack(opts: StackOptions): Promise<RunningStack> {
  // Always a fresh cloud: the hints printed below name the ids of its first records.
  const dataDir = await mkdtemp(join(tmpdir(), 'fleetlab-stack-'));
  if (opts.engine === 'docker') await buildTestImages(opts.dockerSocket);
  const cloud = await startFleetCloud({ port: opts.cloudPort, dataDir: join(dataDir, 'cloud'), fleetName: 'demo' });
  let device: SimDevice | undefined;
  try {
    device = await SimDevice.start({
      port: opts.devicePort,
      dataDir: join(dataDir, 'device'),
      engine: opts.engine,
      dockerSocket: opts.dockerSocket,
      localMode: false,
      cloud: { url: cloud.url, provisioningKey: cloud.provisioningKey, pollIntervalMs: opts.pollIntervalMs, reportIntervalMs: 1000 },
    });
    const info = device.info();
    // Registration is the device's first act; wait for it so the printed fleet holds the device.
    let deviceId: number | undefined;
    for (let i = 0; i < 120 && deviceId === undefined; i++) {
      const rows = (await cloud.call('GET', `/v6/device?$select=id&$filter=uuid eq '${info.uuid}'`)) as { d: Array<{ id: number }> };
      deviceId = rows.d[0]?.id;
      if (deviceId === undefined) await new Promise((r) => setTimeout(r, 250));
    }
    if (deviceId === undefined) throw new FleetlabError('SUP_ERR_INTERNAL', `the device did not register within 30 s; see ${device.supervisorLog}`);
    const running = device;
    return {
      cloud: { url: cloud.url, adminKey: cloud.adminKey, dataDir: cloud.dataDir },
      fleet: cloud.fleet,
      device: { url: info.url, apiKey: info.apiKey, uuid: info.uuid, id: deviceId, dataDir: info.dataDir },
      async stop() {
        await running.stop();
        await cloud.close();
      },
    };
  } catch (err) {
    await device?.stop().catch(() => undefined);
    await cloud.close();
    throw err;
  }
}

/** Prints the ready line and how to use the stack, then runs until a signal. */
export async function runStack(opts: StackOptions): Promise<void> {
  // Handlers first: a parent that stops us as soon as it reads the ready line gets a clean stop.
  let stack: RunningStack | undefined;
  let stopRequested = false;
  const { done } = untilStopped(async () => {
    stopRequested = true;
    await stack?.stop();
  });
  stack = await startStack(opts);
  if (stopRequested) return stack.stop();
  const { cloud, fleet, device } = stack;
  process.stdout.write(`${JSON.stringify({ event: 'ready', cloud, fleet, device })}\n`);
  const image = opts.engine === 'sim' ? 'fleetlab/test-app:1 (pulled from the simulated registry)' : 'fleetlab/test-app:1 (built locally)';
  process.stderr.write(
    [
      '',
      `fleetlab: cloud ${cloud.url} with fleet "${fleet.name}" (id ${fleet.id}); simulated device ${device.uuid} registered to it`,
      `  cloud API:     ${cloud.url}/v6/device   (Authorization: Bearer ${cloud.adminKey})`,
      `  device API:    ${device.url}/v1/device?apikey=${device.apiKey}`,
      `  engine:        ${opts.engine}; state in ${resolve(cloud.dataDir, '..')}`,
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
      '  stop with Ctrl-C',
      '',
    ].join('\n'),
  );
  await done;
}
