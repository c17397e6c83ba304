/**
 * Keys scoped to one app against every endpoint of the device API (issue 16 item 3): a key
 * of one app that touches the other app's data is refused (401, the one body) or gets its own
 * app's data only, and the device key still reaches both. Each row runs both ways (app 1's
 * key against app 2, and app 2's against app 1) on one device with two apps, over real peers
 * (dockerd, the simulated D-Bus services, a journal read with journalctl).
 * docs/device-api-scopes.md is the decision table these rows hold the code to.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containerLogMeta } from '../sim/journal/journal-sim.js';
import { startSupervisorFixture, twoAppState, waitApplied, type SupervisorFixture } from './helpers/supervisor-fixture.js';

interface Side {
  appId: number;
  name: string;
  commit: string;
  releaseId: number;
  services: string[];
}

const apps: Record<1 | 2, Side> = {
  1: { appId: 1, name: 'myapp', commit: 'commit1', releaseId: 1, services: ['main', 'worker'] },
  2: { appId: 2, name: 'other', commit: 'other7', releaseId: 7, services: ['solo'] },
};
const pairs = [
  { me: apps[1], other: apps[2], label: 'key of app 1 against app 2' },
  { me: apps[2], other: apps[1], label: 'key of app 2 against app 1' },
];
const unauthorized = { status: 'failed', message: 'Unauthorized' };

let f: SupervisorFixture;
let baseUrl: string;

beforeAll(async () => {
  f = await startSupervisorFixture();
  const res = await call('POST', '/v2/local/target-state', deviceKey(), { local: twoAppState() });
  expect(res.status).toBe(200);
  await waitApplied(f.sup);
  // /v2/local/logs streams forever: it is read over a real socket, not inject.
  baseUrl = await f.sup.api.listen({ port: 0, host: '127.0.0.1' });
});
afterAll(async () => {
  await f?.close();
});

const deviceKey = () => f.sup.keys.deviceKey();
const keyOf = (side: Side) => f.sup.keys.appKey(side.appId);

type Method = 'GET' | 'POST' | 'PATCH';
async function call(method: Method, url: string, key: string, body?: unknown) {
  const res = await f.sup.api.inject({
    method,
    url: `${url}${url.includes('?') ? '&' : '?'}apikey=${key}`,
    ...(body !== undefined ? { payload: body as object, headers: { 'content-type': 'application/json' } } : {}),
  });
  return { status: res.statusCode, body: res.body, json: () => res.json() as any };
}

function expectRefused(res: { status: number; json(): unknown }, what: string): void {
  expect(res.status, what).toBe(401);
  expect(res.json(), what).toEqual(unauthorized);
}

/** Each container of the app as service:id:state, to show a refused action changed nothing. */
async function containersOf(side: Side): Promise<string[]> {
  return (await f.sup.actions.containers(side.appId)).map((c) => `${c.serviceName}:${c.id}:${c.state}`).sort();
}

/** Runs fn while the app holds the update lock of its first service, as the app itself would. */
async function withAppLock<T>(side: Side, fn: () => Promise<T>): Promise<T> {
  const dir = f.sup.locks.dir(side.appId, side.services[0]!);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'updates.lock'), '');
  try {
    return await fn();
  } finally {
    rmSync(join(dir, 'updates.lock'), { force: true });
  }
}

/** An action on `other` with `me`'s key: 401 and nothing of `other` changed. */
async function refusedWithoutEffect(me: Side, other: Side, method: Method, url: string, body?: unknown): Promise<void> {
  const before = await containersOf(other);
  expectRefused(await call(method, url, keyOf(me), body), `${method} ${url}`);
  await f.sup.state.settled();
  expect(await containersOf(other)).toEqual(before);
}

/** Journals one line per container of both apps and one host line, each carrying `token`. */
async function writeJournalMarkers(token: string): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  await f.journal.write({ message: `${token} host`, unit: 'demo.service' });
  for (const side of Object.values(apps)) {
    for (const c of await f.sup.actions.containers(side.appId)) {
      ids.set(c.serviceName, c.id);
      await f.journal.write({ message: `${token} ${c.serviceName}`, ...containerLogMeta({ id: c.id, name: c.name }) });
    }
  }
  await f.journal.flush();
  return ids;
}

async function journal(key: string, token: string, body: Record<string, unknown>): Promise<string[]> {
  const res = await call('POST', '/v2/journal-logs', key, { format: 'cat', ...body });
  expect(res.status).toBe(200);
  return res.body.split('\n').filter((l) => l.startsWith(`${token} `)).map((l) => l.slice(token.length + 1)).sort();
}

interface LogLine {
  message: string;
  serviceName: string;
}

/** GET /v2/local/logs over HTTP, read into `lines` until stopped. */
async function followLogs(key: string) {
  const abort = new AbortController();
  const res = await fetch(`${baseUrl}/v2/local/logs?apikey=${key}`, { signal: abort.signal });
  expect(res.status).toBe(200);
  const lines: LogLine[] = [];
  const reading = (async () => {
    let buffered = '';
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buffered += Buffer.from(chunk).toString();
        const parts = buffered.split('\n');
        buffered = parts.pop()!;
        lines.push(...parts.filter(Boolean).map((p) => JSON.parse(p) as LogLine));
      }
    } catch {
      // aborted
    }
  })();
  return {
    lines,
    /** Bounded wait for lines the services print every 2 s; fails with what it saw. */
    async until(what: string, ok: () => boolean): Promise<void> {
      for (let i = 0; i < 300 && !ok(); i++) await new Promise((r) => setTimeout(r, 100));
      expect(ok(), `${what}; saw ${JSON.stringify(lines.map((l) => l.serviceName))}`).toBe(true);
    },
    async stop(): Promise<void> {
      abort.abort();
      await reading;
    },
  };
}

const services = (lines: LogLine[]) => new Set(lines.map((l) => l.serviceName));

interface Row {
  endpoint: string;
  /** What `me`'s scoped key gets when it touches `other`'s data. */
  scoped(me: Side, other: Side): Promise<void>;
  /** The device key reaches `other`'s data. */
  device(other: Side): Promise<void>;
}

const rows: Row[] = [
  {
    endpoint: 'GET /v1/device',
    async scoped(me) {
      const res = await call('GET', '/v1/device', keyOf(me));
      expect(res.status).toBe(200);
      expect(res.json().commit).toBe(me.commit);
    },
    async device() {
      expect((await call('GET', '/v1/device', deviceKey())).json().commit).toBe(apps[1].commit);
    },
  },
  {
    endpoint: 'GET /v2/applications/state',
    async scoped(me) {
      const body = (await call('GET', '/v2/applications/state', keyOf(me))).json();
      expect(Object.keys(body)).toEqual([me.name]);
      expect(Object.keys(body[me.name].services).sort()).toEqual(me.services);
    },
    async device(other) {
      const body = (await call('GET', '/v2/applications/state', deviceKey())).json();
      expect(Object.keys(body).sort()).toEqual(['myapp', 'other']);
      expect(Object.keys(body[other.name].services).sort()).toEqual(other.services);
    },
  },
  {
    endpoint: 'GET /v2/applications/:appId/state',
    async scoped(me, other) {
      expect((await call('GET', `/v2/applications/${me.appId}/state`, keyOf(me))).status).toBe(200);
      expectRefused(await call('GET', `/v2/applications/${other.appId}/state`, keyOf(me)), 'other app');
      // An id no app has is refused the same way: a scoped key cannot probe which apps exist.
      expectRefused(await call('GET', '/v2/applications/99/state', keyOf(me)), 'unknown app');
    },
    async device(other) {
      const res = await call('GET', `/v2/applications/${other.appId}/state`, deviceKey());
      expect(res.status).toBe(200);
      expect(Object.keys(res.json().local)).toEqual([String(other.appId)]);
      expect((await call('GET', '/v2/applications/99/state', deviceKey())).status).toBe(404);
    },
  },
  {
    endpoint: 'GET /v2/state/status',
    async scoped(me) {
      const body = (await call('GET', '/v2/state/status', keyOf(me))).json();
      expect(body.containers.map((c: any) => c.serviceName).sort()).toEqual(me.services);
      expect(body.images.map((i: any) => i.appId)).toEqual(me.services.map(() => me.appId));
      expect(body.release).toBe(String(me.releaseId));
    },
    async device(other) {
      const body = (await call('GET', '/v2/state/status', deviceKey())).json();
      const names = body.containers.map((c: any) => c.serviceName);
      for (const s of other.services) expect(names).toContain(s);
      expect(body.images.some((i: any) => i.appId === other.appId)).toBe(true);
    },
  },
  {
    endpoint: 'GET /v2/containerId',
    async scoped(me, other) {
      const all = (await call('GET', '/v2/containerId', keyOf(me))).json();
      expect(Object.keys(all.services).sort()).toEqual(me.services);
      // Another app's service is as unknown to a scoped key as a typo.
      expect((await call('GET', `/v2/containerId?service=${other.services[0]}`, keyOf(me))).status).toBe(404);
    },
    async device(other) {
      const [c] = await f.sup.actions.containers(other.appId, other.services[0]);
      const res = await call('GET', `/v2/containerId?service=${other.services[0]}`, deviceKey());
      expect(res.json()).toEqual({ status: 'success', containerId: c!.id });
    },
  },
  ...(['restart-service', 'stop-service', 'start-service'] as const).map(
    (action): Row => ({
      endpoint: `POST /v2/applications/:appId/${action}`,
      async scoped(me, other) {
        await refusedWithoutEffect(me, other, 'POST', `/v2/applications/${other.appId}/${action}`, { serviceName: other.services[0] });
      },
      async device(other) {
        // Past the scope: the device key is told the other app has no such service.
        const res = await call('POST', `/v2/applications/${other.appId}/${action}`, deviceKey(), { serviceName: 'nope' });
        expect(res.status).toBe(404);
        expect(res.json().message).toContain(`app ${other.appId}`);
      },
    }),
  ),
  ...(['restart', 'purge'] as const).map(
    (action): Row => ({
      endpoint: `POST /v2/applications/:appId/${action}`,
      async scoped(me, other) {
        await refusedWithoutEffect(me, other, 'POST', `/v2/applications/${other.appId}/${action}`, {});
      },
      async device(other) {
        // Past the scope, up to the other app's own update lock.
        const res = await withAppLock(other, () => call('POST', `/v2/applications/${other.appId}/${action}`, deviceKey(), {}));
        expect(res.status).toBe(423);
      },
    }),
  ),
  {
    endpoint: 'POST /v1/restart',
    async scoped(me, other) {
      await refusedWithoutEffect(me, other, 'POST', '/v1/restart', { appId: other.appId });
    },
    async device(other) {
      expect((await withAppLock(other, () => call('POST', '/v1/restart', deviceKey(), { appId: other.appId }))).status).toBe(423);
    },
  },
  {
    endpoint: 'POST /v1/purge',
    async scoped(me, other) {
      // The refusal has the one 401 body here too, not purge's {Data, Error}.
      await refusedWithoutEffect(me, other, 'POST', '/v1/purge', { appId: other.appId });
    },
    async device(other) {
      const res = await withAppLock(other, () => call('POST', '/v1/purge', deviceKey(), { appId: other.appId }));
      expect(res.status).toBe(423);
      expect(res.json()).toEqual({ Data: '', Error: expect.stringMatching(/lock/) });
    },
  },
  {
    endpoint: 'GET /v1/apps/:appId',
    async scoped(me, other) {
      expectRefused(await call('GET', `/v1/apps/${other.appId}`, keyOf(me)), 'other app');
    },
    async device(other) {
      const res = await call('GET', `/v1/apps/${other.appId}`, deviceKey());
      // App 2 has one service; app 1 has two, which the v1 endpoints refuse with 400.
      if (other.services.length === 1) expect(res.json()).toMatchObject({ appId: other.appId, commit: other.commit });
      else expect(res.status).toBe(400);
    },
  },
  {
    endpoint: 'POST /v1/apps/:appId/stop',
    async scoped(me, other) {
      await refusedWithoutEffect(me, other, 'POST', `/v1/apps/${other.appId}/stop`, {});
    },
    async device(other) {
      const res = await withAppLock(other, () => call('POST', `/v1/apps/${other.appId}/stop`, deviceKey(), {}));
      expect(res.status).toBe(other.services.length === 1 ? 423 : 400);
    },
  },
  {
    endpoint: 'POST /v1/apps/:appId/start',
    async scoped(me, other) {
      await refusedWithoutEffect(me, other, 'POST', `/v1/apps/${other.appId}/start`, {});
    },
    async device(other) {
      const res = await call('POST', `/v1/apps/${other.appId}/start`, deviceKey(), {});
      // Starting a running service changes nothing.
      if (other.services.length === 1) expect(res.json()).toEqual({ containerId: (await f.sup.actions.containers(other.appId))[0]!.id });
      else expect(res.status).toBe(400);
    },
  },
  {
    endpoint: 'GET /v2/cleanup-volumes',
    async scoped(me, other) {
      const orphan = `orphan-${randomUUID().slice(0, 8)}`;
      await f.sup.engine.createVolume(me.appId, orphan);
      await f.sup.engine.createVolume(other.appId, orphan);
      try {
        expect((await call('GET', '/v2/cleanup-volumes', keyOf(me))).json()).toEqual({ status: 'success' });
        const left = (await f.sup.engine.snapshot()).volumes.filter((v) => v.volume === orphan).map((v) => v.appId);
        expect(left).toEqual([other.appId]);
      } finally {
        await f.sup.engine.removeVolume(f.sup.engine.volumeName(other.appId, orphan));
        await f.sup.engine.removeVolume(f.sup.engine.volumeName(me.appId, orphan));
      }
    },
    async device(other) {
      const orphan = `orphan-${randomUUID().slice(0, 8)}`;
      await f.sup.engine.createVolume(other.appId, orphan);
      expect((await call('GET', '/v2/cleanup-volumes', deviceKey())).json()).toEqual({ status: 'success' });
      expect((await f.sup.engine.snapshot()).volumes.filter((v) => v.volume === orphan)).toEqual([]);
    },
  },
  {
    endpoint: 'POST /v2/journal-logs',
    async scoped(me, other) {
      const token = randomUUID();
      const ids = await writeJournalMarkers(token);
      const key = keyOf(me);
      // No filter: the app's own containers, not the host's lines nor the other app's.
      expect(await journal(key, token, {})).toEqual(me.services);
      for (const s of other.services) {
        expect(await journal(key, token, { containerId: ids.get(s) })).toEqual([]);
        expect(await journal(key, token, { containerId: ids.get(s)!.slice(0, 12) })).toEqual([]);
      }
      expect(await journal(key, token, { unit: 'demo.service' })).toEqual([]);
      expect(await journal(key, token, { containerId: ids.get(me.services[0]!) })).toEqual([me.services[0]]);
    },
    async device(other) {
      const token = randomUUID();
      const ids = await writeJournalMarkers(token);
      expect(await journal(deviceKey(), token, {})).toEqual(['host', 'main', 'solo', 'worker']);
      expect(await journal(deviceKey(), token, { containerId: ids.get(other.services[0]!) })).toEqual([other.services[0]]);
    },
  },
  {
    endpoint: 'GET /v2/local/target-state',
    async scoped(me) {
      const local = (await call('GET', '/v2/local/target-state', keyOf(me))).json().state.local;
      expect(Object.keys(local.apps)).toEqual([String(me.appId)]);
      expect(local.name).toBe('test-device');
    },
    async device() {
      expect(Object.keys((await call('GET', '/v2/local/target-state', deviceKey())).json().state.local.apps)).toEqual(['1', '2']);
    },
  },
  {
    endpoint: 'POST /v2/local/target-state',
    async scoped(me) {
      const whole = (await call('GET', '/v2/local/target-state', deviceKey())).json().state.local;
      // A state naming the other app is refused, and the target stays as it was.
      expectRefused(await call('POST', '/v2/local/target-state', keyOf(me), { local: whole }), 'naming the other app');
      // What the key reads back (its app only) posts again without removing the other app.
      const mine = (await call('GET', '/v2/local/target-state', keyOf(me))).json().state.local;
      expect((await call('POST', '/v2/local/target-state', keyOf(me), { local: mine })).status).toBe(200);
      expect((await call('GET', '/v2/local/target-state', deviceKey())).json().state.local).toEqual(whole);
      await waitApplied(f.sup);
    },
    async device(other) {
      const whole = (await call('GET', '/v2/local/target-state', deviceKey())).json().state.local;
      expect((await call('POST', '/v2/local/target-state', deviceKey(), { local: whole })).status).toBe(200);
      expect(Object.keys((await call('GET', '/v2/local/target-state', deviceKey())).json().state.local.apps)).toContain(String(other.appId));
      await waitApplied(f.sup);
    },
  },
  {
    endpoint: 'GET /v2/local/logs',
    async scoped(me, other) {
      const mine = await followLogs(keyOf(me));
      const all = await followLogs(deviceKey());
      try {
        const marker = `supervisor marker ${randomUUID()}`;
        f.sup.log.info(marker);
        await all.until('the device key sees both apps', () => [...me.services, ...other.services].every((s) => services(all.lines).has(s)));
        await mine.until("the scoped key sees its app's services", () => me.services.every((s) => services(mine.lines).has(s)));
        expect([...services(mine.lines)].sort()).toEqual(me.services);
        // The supervisor's own lines speak of every app; the device key got this one at once.
        expect(all.lines.some((l) => l.message === marker)).toBe(true);
        expect(mine.lines.some((l) => l.message === marker)).toBe(false);
      } finally {
        await mine.stop();
        await all.stop();
      }
    },
    async device(other) {
      const all = await followLogs(deviceKey());
      try {
        await all.until("the device key sees the other app's services", () => other.services.every((s) => services(all.lines).has(s)));
      } finally {
        await all.stop();
      }
    },
  },
  {
    endpoint: 'POST /v1/regenerate-api-key',
    async scoped(me, other) {
      const old = keyOf(me);
      const res = await call('POST', '/v1/regenerate-api-key', old);
      expect(res.status).toBe(200);
      expect(res.body).toBe(keyOf(me));
      expect((await call('GET', `/v2/applications/${me.appId}/state`, old)).status).toBe(401);
      // Only the caller's own key changed.
      expect((await call('GET', `/v2/applications/${other.appId}/state`, keyOf(other))).status).toBe(200);
      expect((await call('GET', '/v1/device', deviceKey())).status).toBe(200);
    },
    async device(other) {
      const appKey = keyOf(other);
      expect((await call('POST', '/v1/regenerate-api-key', deviceKey())).status).toBe(200);
      expect(keyOf(other)).toBe(appKey);
      expect((await call('GET', `/v2/applications/${other.appId}/state`, appKey)).status).toBe(200);
    },
  },
];

describe.each(rows)('$endpoint', (row) => {
  it.each(pairs)('$label', async ({ me, other }) => {
    await row.scoped(me, other);
  });
  it.each([apps[1], apps[2]])('the device key reaches app $appId', async (other) => {
    await row.device(other);
  });
});

/**
 * Endpoints about the device as a whole, which the supervisor-api label grants (as
 * balena-supervisor does): a scoped key gets what the device key gets, and its device-wide
 * actions still respect every app's update locks.
 */
describe('device-wide endpoints', () => {
  it.each(['/v2/version', '/v2/device/name', '/v2/device/vpn', '/v2/device/tags', '/v1/device/host-config', '/v2/local/device-info'])(
    'GET %s answers a scoped key as the device key',
    async (url) => {
      const asDevice = await call('GET', url, deviceKey());
      for (const side of [apps[1], apps[2]]) {
        const scopedRes = await call('GET', url, keyOf(side));
        expect(scopedRes.status).toBe(asDevice.status);
        expect(scopedRes.json()).toEqual(asDevice.json());
      }
    },
  );

  it.each(pairs)("$label: reboot, shutdown and host-config wait for the other app's lock", async ({ me, other }) => {
    await withAppLock(other, async () => {
      expect((await call('POST', '/v1/reboot', keyOf(me), {})).status).toBe(423);
      expect((await call('POST', '/v1/shutdown', keyOf(me), {})).status).toBe(423);
      expect((await call('PATCH', '/v1/device/host-config', keyOf(me), { network: { hostname: 'scoped' } })).status).toBe(423);
    });
    expect(f.peer.powerRequests).toEqual([]);
    expect(f.peer.hostname).not.toBe('scoped');
  });

  it('update and blink answer a scoped key', async () => {
    expect((await call('POST', '/v1/update', keyOf(apps[2]), {})).status).toBe(204);
    expect((await call('POST', '/v1/blink', keyOf(apps[2]))).status).toBe(200);
    f.sup.blinker.stop();
    await f.sup.state.settled();
  });
});
