/**
 * The cloud's side of the device tunnel with a device that misbehaves on purpose: one that
 * connects and never answers (the proxy's 504), one with a wrong key (refused), and a
 * reconnect that replaces a half-open connection.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { FastifyInstance } from 'fastify';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { buildCloud } from '../src/cloud/server.js';
import { databases } from './helpers/cloud-fixture.js';

const dbs = databases();
let cloud: FastifyInstance;
let base: string;
let adminKey: string;
const uuid = 'a'.repeat(32);
const deviceKey = 'device-key-that-is-long-enough-0001';

async function call(key: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, text, body: text ? (JSON.parse(text) as unknown) : undefined };
}

function connect(key: string): Promise<WebSocket> {
  const ws = new WebSocket(`${base.replace('http', 'ws')}/device/v3/${uuid}/tunnel`, { headers: { authorization: `Bearer ${key}` } });
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('unexpected-response', (_req, res) => reject(new Error(`refused with ${res.statusCode}`)));
    ws.once('error', reject);
  });
}

const online = async () => ((await call(adminKey, 'GET', `/v6/device(uuid='${uuid}')?$select=is_online`)).body as { d: Array<{ is_online: boolean }> }).d[0]?.is_online;

beforeAll(async () => {
  const db = await dbs.open('sqlite');
  adminKey = (await prepareDatabase(db)).key!;
  cloud = buildCloud({ db, proxyTimeoutMs: 500, tunnelHeartbeatMs: 60_000 });
  base = (await cloud.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
  const orgs = (await call(adminKey, 'GET', `/v6/organization?$filter=handle eq 'admin'`)).body as { d: Array<{ id: number }> };
  const fleet = (await call(adminKey, 'POST', '/v6/application', { app_name: 'tunnel', organization: orgs.d[0]!.id, device_type: 'raspberrypi3' })).body as { id: number };
  const provisioning = (await call(adminKey, 'POST', `/api-key/application/${fleet.id}/provisioning`, {})).body as string;
  const registered = await call(provisioning, 'POST', '/device/register', { uuid, api_key: deviceKey, device_type: 'raspberrypi3' });
  expect(registered.status).toBe(201);
});

afterAll(async () => {
  await cloud?.close();
  await dbs.closeAll();
});

describe('device tunnel, cloud side', () => {
  it('refuses a tunnel with a key that is not this device\'s', async () => {
    await expect(connect('not-the-key-of-this-device-000000')).rejects.toThrow('refused with 401');
    expect(await online()).toBe(false);
  });

  it('a connected device that never answers makes the proxy answer 504; a reconnect replaces it', async () => {
    const silent = await connect(deviceKey);
    const received: unknown[] = [];
    silent.on('message', (m) => received.push(JSON.parse(m.toString())));
    await expect.poll(online).toBe(true);
    const timedOut = await call(adminKey, 'POST', '/supervisor/v1/device', { uuid, method: 'GET' });
    expect(timedOut.status).toBe(504);
    expect(timedOut.body).toMatch(/did not answer GET \/v1\/device within 500 ms/);
    // The request did reach the device, framed as the protocol says.
    expect(received).toEqual([{ type: 'request', id: 1, method: 'GET', path: '/v1/device' }]);

    // The same device reconnects (after a partition its old socket may linger): the new one
    // takes over and answers.
    const fresh = await connect(deviceKey);
    fresh.on('message', (m) => {
      const req = JSON.parse(m.toString()) as { id: number };
      fresh.send(JSON.stringify({ type: 'response', id: req.id, status: 200, contentType: 'application/json', body: '{"status":"Idle"}' }));
    });
    await expect.poll(() => silent.readyState).toBe(WebSocket.CLOSED);
    const answered = await call(adminKey, 'POST', '/supervisor/v1/device', { uuid, method: 'GET' });
    expect(answered).toMatchObject({ status: 200, body: { status: 'Idle' } });
    expect(await online()).toBe(true);
    fresh.close();
    await expect.poll(online).toBe(false);
  });
});
