/**
 * The README's balena-sdk-style example (examples/cloud-client/register-device.mjs) run as a
 * newcomer runs it, against a real cloud on SQLite: it must keep working as the API moves.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { cloudOn, databases, type CloudFixture } from './helpers/cloud-fixture.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const dbs = databases();
let c: CloudFixture;
let base: string;

beforeAll(async () => {
  c = await cloudOn(await dbs.open('sqlite'));
  base = (await c.app.listen({ port: 0, host: '127.0.0.1' })).replace('localhost', '127.0.0.1');
});
afterAll(async () => {
  await c?.close();
  await dbs.closeAll();
});

const example = (key: string, name: string) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, ['examples/cloud-client/register-device.mjs', name], { cwd: root, env: { ...process.env, FLEETLAB_CLOUD: base, FLEETLAB_KEY: key } }, (err, stdout, stderr) =>
      resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
    );
  });

it('creates a fleet, a provisioning key and a registered, tagged device; a second run names the 409', async () => {
  const user = await c.app.inject({ method: 'POST', url: '/fleetlab/users', headers: { authorization: `Bearer ${c.adminKey}` }, payload: { username: 'alice' } });
  const key = (JSON.parse(user.body) as { apiKey: string }).apiKey;
  const first = await example(key, 'lab-sdk');
  expect(first.stderr).toBe('');
  const lines = first.stdout.trim().split('\n');
  expect(lines[0]).toMatch(/^fleet alice\/lab-sdk \(id \d+\)$/);
  expect(lines[1]).toMatch(/^device bench-1 \(id \d+, uuid [0-9a-f]{32}\) in fleet \d+$/);
  const uuid = /uuid ([0-9a-f]{32})/.exec(lines[1]!)![1]!;
  expect(JSON.parse(lines[2]!)).toEqual([{ uuid, device_name: 'bench-1', device_tag: [{ tag_key: 'room', value: 'lab-3' }] }]);
  expect(lines[3]).toBe(`target state of ${uuid}: apps []`);
  expect(first.code).toBe(0);

  const again = await example(key, 'lab-sdk');
  expect(again.code).not.toBe(0);
  expect(again.stderr).toContain('409 CLOUD_ERR_UNIQUE: "slug" must be unique.');
});
