/**
 * Compose's `networks` and `depends_on` carried by the target state, applied by the real
 * supervisor on the real dockerd: a service joins each of its networks by its own name and
 * no other, and a service starts only after what it depends on has started.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WireLocalState } from '../src/protocol/target-state.js';
import { startSupervisorFixture, waitApplied, type SupervisorFixture } from './helpers/supervisor-fixture.js';

let f: SupervisorFixture;
beforeAll(async () => {
  f = await startSupervisorFixture();
});
afterAll(async () => {
  await f?.close();
});

/** db on `back`; api on `back` and `front`, after db; web on `front`, after api. */
function linkedState(): WireLocalState {
  const service = (id: number, serviceName: string, extra: object) => ({ serviceName, serviceId: id, imageId: id, image: 'fleetlab/test-app:1', environment: {}, labels: {}, ...extra });
  return {
    name: 'links',
    config: { SUPERVISOR_LOCAL_MODE: '1' },
    apps: {
      '1': {
        name: 'linked',
        commit: 'links1',
        releaseId: 1,
        services: {
          '1': service(1, 'web', { networks: ['front'], depends_on: ['api'] }),
          '2': service(2, 'api', { networks: ['back', 'front'], depends_on: ['db'] }),
          '3': service(3, 'db', { networks: ['back'] }),
        },
        networks: { back: {}, front: {} },
      },
    },
  };
}

/**
 * What the engine's DNS answers for `host` inside a container, asked with busybox's own
 * resolver (the static busybox's libc lookup crashes without NSS modules).
 */
async function resolveIn(containerId: string, host: string): Promise<string> {
  const exec = await f.docker.getContainer(containerId).exec({ Cmd: ['sh', '-c', `busybox nslookup ${host} 2>&1; echo "exit $?"`], AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({});
  const chunks: Buffer[] = [];
  await new Promise<void>((resolve) => {
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve());
  });
  return Buffer.concat(chunks).toString('latin1');
}

describe('networks and depends_on on dockerd', () => {
  it('starts db, then api, then web, each on its own networks, reachable there by name only', async () => {
    const res = await f.sup.api.inject({ method: 'POST', url: `/v2/local/target-state?apikey=${f.key()}`, payload: { local: linkedState() } });
    expect(res.statusCode).toBe(200);
    await waitApplied(f.sup);

    const [web, api, db] = await Promise.all(['web', 'api', 'db'].map(async (n) => (await f.sup.actions.containers(1, n))[0]!));
    const inspect = await Promise.all([web, api, db].map((c) => f.docker.getContainer(c.id).inspect()));
    const [webI, apiI, dbI] = inspect;
    const prefix = `${f.sup.uuid.slice(0, 7)}_1_`;
    expect(Object.keys(apiI!.NetworkSettings.Networks).sort()).toEqual([`${prefix}back`, `${prefix}front`]);
    expect(Object.keys(webI!.NetworkSettings.Networks)).toEqual([`${prefix}front`]);
    expect(Object.keys(dbI!.NetworkSettings.Networks)).toEqual([`${prefix}back`]);
    expect(apiI!.NetworkSettings.Networks[`${prefix}back`]!.Aliases).toContain('api');
    expect(apiI!.NetworkSettings.Networks[`${prefix}front`]!.Aliases).toContain('api');

    const started = (i: (typeof inspect)[number]) => Date.parse(i.State.StartedAt);
    expect(started(dbI!)).toBeLessThan(started(apiI!));
    expect(started(apiI!)).toBeLessThan(started(webI!));
    // Created only after the dependency started: the planner waits a round, not just the start.
    expect(Date.parse(apiI!.Created)).toBeGreaterThanOrEqual(started(dbI!));

    const apiOnFront = apiI!.NetworkSettings.Networks[`${prefix}front`]!.IPAddress;
    const dbOnBack = dbI!.NetworkSettings.Networks[`${prefix}back`]!.IPAddress;
    expect(await resolveIn(web.id, 'api')).toMatch(new RegExp(`Address: ${apiOnFront.replace(/\./g, '\\.')}\\s[\\s\\S]*exit 0`));
    expect(await resolveIn(api.id, 'db')).toMatch(new RegExp(`Address: ${dbOnBack.replace(/\./g, '\\.')}\\s[\\s\\S]*exit 0`));
    expect(await resolveIn(web.id, 'db')).toMatch(/exit 1/);
  });
});
