/**
 * Compose's `healthcheck` and `depends_on: condition: service_healthy` applied by the real
 * supervisor, on the real dockerd and on the simulated engine alike: a service whose check
 * fails shows `unhealthy` in the state endpoints, and a service waiting on another's health
 * is created only after the engine has reported that service healthy.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimEngine, type SimEngineHandle } from '../sim/engine/index.js';
import type { WireLocalState } from '../src/protocol/target-state.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { eventually } from './helpers/engine-targets.js';
import { startSupervisorFixture, type SupervisorFixture } from './helpers/supervisor-fixture.js';

/** db passes its check; web waits for db to be healthy; sick fails its check from the start. */
function healthState(): WireLocalState {
  const service = (id: number, serviceName: string, image: string, extra: object) => ({ serviceName, serviceId: id, imageId: id, image, environment: {}, labels: {}, ...extra });
  return {
    name: 'health',
    config: { SUPERVISOR_LOCAL_MODE: '1' },
    apps: {
      '1': {
        name: 'checked',
        commit: 'health1',
        releaseId: 1,
        services: {
          '1': service(1, 'web', 'fleetlab/test-app:1', { depends_on: { db: { condition: 'service_healthy' } } }),
          '2': service(2, 'db', 'fleetlab/test-app:1', { healthcheck: { test: ['CMD-SHELL', 'exit 0'], interval: '1s' } }),
          '3': service(3, 'sick', 'fleetlab/test-app:2', { healthcheck: { test: ['CMD-SHELL', 'exit 1'], interval: '500ms', retries: 1 } }),
        },
      },
    },
  };
}

type Listed = { status: string; serviceName: string; health?: string };

describe.each(['dockerd', 'sim'] as const)('healthchecks on %s', (engine) => {
  let f: SupervisorFixture;
  let sim: SimEngineHandle | undefined;
  let dir: string | undefined;
  const events: Array<{ action: string; service: string }> = [];
  let stream: Readable | undefined;

  beforeAll(async () => {
    if (engine === 'sim') {
      dir = mkdtempSync(join(tmpdir(), 'fleetlab-health-'));
      sim = await startSimEngine({ socketPath: join(dir, 'engine.sock'), dataDir: join(dir, 'engine'), bandwidth: 20_000_000 });
    }
    f = await startSupervisorFixture(sim ? { dockerSocket: sim.socketPath } : {});
    stream = (await f.docker.getEvents({ filters: { type: ['container'], label: [`${LABEL.device}=${f.sup.uuid}`] } })) as Readable;
    let buffered = '';
    stream.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
        const e = JSON.parse(buffered.slice(0, nl)) as { Action: string; Actor: { Attributes: Record<string, string> } };
        buffered = buffered.slice(nl + 1);
        events.push({ action: e.Action, service: e.Actor.Attributes[LABEL.serviceName] ?? '' });
      }
    });
  });
  afterAll(async () => {
    stream?.destroy();
    await f?.close();
    await sim?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('shows a failing check as unhealthy, and starts web only once db is healthy', async () => {
    const res = await f.sup.api.inject({ method: 'POST', url: `/v2/local/target-state?apikey=${f.key()}`, payload: { local: healthState() } });
    expect(res.statusCode).toBe(200);
    const status = await eventually(async () => {
      const body = (await f.sup.api.inject({ method: 'GET', url: `/v2/state/status?apikey=${f.key()}` })).json() as { appState: string; containers: Listed[] };
      const of = (name: string) => body.containers.find((c) => c.serviceName === name);
      return body.appState === 'applied' && of('web')?.status === 'Running' && of('sick')?.health === 'unhealthy' ? body : undefined;
    }, 90_000, 'web running and sick unhealthy');
    const of = (name: string) => status.containers.find((c) => c.serviceName === name)!;
    expect([of('db').status, of('db').health]).toEqual(['Running', 'healthy']);
    expect([of('sick').status, of('sick').health]).toEqual(['Running', 'unhealthy']);
    // A service without a healthcheck reports none.
    expect(of('web').health).toBeUndefined();

    const apps = (await f.sup.api.inject({ method: 'GET', url: `/v2/applications/state?apikey=${f.key()}` })).json() as { checked: { services: Record<string, Listed> } };
    expect(apps.checked.services.sick).toMatchObject({ status: 'Running', health: 'unhealthy' });
    expect(apps.checked.services.db).toMatchObject({ status: 'Running', health: 'healthy' });
    const one = (await f.sup.api.inject({ method: 'GET', url: `/v2/applications/1/state?apikey=${f.key()}` })).json() as { local: Record<string, { services: Record<string, Listed> }> };
    expect(one.local['1']!.services['3']).toMatchObject({ status: 'Running', health: 'unhealthy' });

    // The engine's own record of the order: db reported healthy before web's container existed.
    await eventually(async () => (events.some((e) => e.service === 'web' && e.action === 'start') ? true : undefined), 10_000, 'the start event of web');
    const dbHealthy = events.findIndex((e) => e.service === 'db' && e.action === 'health_status: healthy');
    const webCreated = events.findIndex((e) => e.service === 'web' && e.action === 'create');
    expect(dbHealthy).toBeGreaterThanOrEqual(0);
    expect(webCreated).toBeGreaterThan(dbHealthy);
    expect(events.findIndex((e) => e.service === 'db' && e.action === 'start')).toBeLessThan(dbHealthy);
  });
});
