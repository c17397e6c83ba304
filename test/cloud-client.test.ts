/**
 * The supervisor's HTTP calls to the cloud, against a local server that answers, stalls or
 * returns what each case needs: what is sent, what comes back, and how silence ends.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { CloudClient } from '../src/supervisor/adapters/cloud/cloud-client.js';

const UUID = 'a'.repeat(32);
let server: Server | undefined;

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

async function cloud(handler: (req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<CloudClient> {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => handler(req, body, res));
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return new CloudClient({ url: `http://127.0.0.1:${port}`, timeoutMs: 300, interactiveTimeoutMs: 200 });
}

describe('CloudClient', () => {
  it('registers with the provisioning key as bearer and the request as a JSON body', async () => {
    const seen: Array<{ method?: string; url?: string; auth?: string; type?: string; length?: string; body: string }> = [];
    const client = await cloud((req, body, res) => {
      seen.push({ method: req.method, url: req.url, auth: req.headers.authorization, type: req.headers['content-type'], length: req.headers['content-length'], body });
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 7, uuid: UUID, device_name: 'pi', belongs_to__application: 1 }));
    });
    const request = { uuid: UUID, api_key: 'k'.repeat(32), device_type: 'raspberrypi4-64', device_name: 'pi — the first' };
    expect(await client.register('provisioning-key', request)).toEqual({ id: 7, uuid: UUID, device_name: 'pi', belongs_to__application: 1 });
    expect(seen).toEqual([{ method: 'POST', url: '/device/register', auth: 'Bearer provisioning-key', type: 'application/json', length: String(Buffer.byteLength(JSON.stringify(request))), body: JSON.stringify(request) }]);
  });

  it('hands on the target checked once, with its settings; refuses a bad state as unreachable and a bad config value as a bad request', async () => {
    const service = { serviceName: 'main', serviceId: 1, imageId: 1, image: 'img:1' };
    let served: object = {};
    const client = await cloud((_req, _body, res) => {
      res.writeHead(200, { 'content-type': 'application/json', etag: '"v1"' }).end(JSON.stringify({ [UUID]: served }));
    });
    served = { name: 'pi', config: { SUPERVISOR_POLL_INTERVAL: '60000', SOMETHING_NEW: 'x' }, apps: { '1': { name: 'a', commit: 'c', releaseId: 1, services: { '1': service } } } };
    const fetched = await client.fetchTarget(UUID, 'device-key', undefined);
    expect(fetched.notModified).toBe(false);
    const target = fetched.notModified ? undefined : fetched.target;
    expect(target).toMatchObject({ name: 'pi', settings: { pollIntervalMs: 60000, vpnControl: true }, unknownConfigKeys: ['SOMETHING_NEW'] });
    expect(target!.apps.map((a) => a.appId)).toEqual([1]);

    served = { name: 'pi', config: { SUPERVISOR_DELTA: 'yes' }, apps: { '1': { name: 'a', commit: 'c', releaseId: 1, services: { '2': service } } } };
    await expect(client.fetchTarget(UUID, 'device-key', undefined)).rejects.toMatchObject({ code: 'SUP_ERR_CLOUD_UNREACHABLE', message: 'cloud target state: local.apps.1.services.2.serviceId must equal its key 2' });
    served = { name: 'pi', config: { SUPERVISOR_DELTA: 'yes' }, apps: {} };
    await expect(client.fetchTarget(UUID, 'device-key', undefined)).rejects.toMatchObject({ code: 'SUP_ERR_BAD_REQUEST', message: 'cloud.config.SUPERVISOR_DELTA must be "1" or "0", got "yes"' });
  });

  it('sends the last ETag and takes a 304 as no change', async () => {
    const client = await cloud((req, _body, res) => {
      expect(req.headers['if-none-match']).toBe('"v9"');
      res.writeHead(304, { etag: '"v9"' }).end();
    });
    expect(await client.fetchTarget(UUID, 'device-key', '"v9"')).toEqual({ notModified: true });
  });

  it('says the cloud answered badly when a call fails: the status and the start of the body', async () => {
    const client = await cloud((_req, _body, res) => res.writeHead(502).end('upstream gone'));
    await expect(client.deviceTags(UUID, 'device-key')).rejects.toMatchObject({ code: 'SUP_ERR_CLOUD_UNREACHABLE', message: expect.stringContaining('answered 502 upstream gone') });
  });

  it('gives up on a cloud that sends nothing within the timeout', async () => {
    const client = await cloud(() => undefined);
    // Tags are read while a user waits: the interactive timeout, not the other one.
    await expect(client.deviceTags(UUID, 'device-key')).rejects.toMatchObject({ code: 'SUP_ERR_CLOUD_UNREACHABLE', message: expect.stringContaining('no answer within 200 ms') });
  });

  it('gives up on a body that stops half way', async () => {
    const client = await cloud((_req, _body, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('{"d":[');
    });
    await expect(client.deviceTags(UUID, 'device-key')).rejects.toMatchObject({ code: 'SUP_ERR_CLOUD_UNREACHABLE' });
  });

  it('says so when nothing listens', async () => {
    const client = await cloud(() => undefined);
    await new Promise<void>((resolve) => server!.close(() => resolve()));
    server = undefined;
    await expect(client.report('device-key', {} as never)).rejects.toMatchObject({ code: 'SUP_ERR_CLOUD_UNREACHABLE', message: expect.stringContaining('ECONNREFUSED') });
  });
});
