/**
 * `fleetlab cloud` as a process: one JSON ready line on stdout, the admin key kept in a
 * 0600 file so a restart prints the same key, and the key works over real HTTP.
 */
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { startCloudProcess } from './helpers/cloud-process.js';
import { startPostgres } from '../support/postgres.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const start = startCloudProcess;

describe('fleetlab cloud (CLI)', () => {
  it('prints one ready line; a restart prints the same admin key from the 0600 key file', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'fleetlab-cloud-cli-'));
    dirs.push(dataDir);
    const first = await start(['--data-dir', dataDir]);
    expect(first.ready).toMatchObject({ event: 'ready', url: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/) });
    expect(first.ready.adminKey).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const res = await fetch(`${first.ready.url}/v6/device_type/$count`, { headers: { authorization: `Bearer ${first.ready.adminKey}` } });
    expect(await res.json()).toEqual({ d: expect.any(Number) });
    expect((await fetch(`${first.ready.url}/v6/device_type`)).status).toBe(401);
    expect(await first.stop()).toBe(0);
    expect(first.lines).toHaveLength(1);
    expect((await stat(join(dataDir, 'admin-key'))).mode & 0o777).toBe(0o600);

    const second = await start(['--data-dir', dataDir, '--admin-key', 'a-key-chosen-by-the-operator-000']);
    expect(second.ready.adminKey).toBe('a-key-chosen-by-the-operator-000');
    const ok = await fetch(`${second.ready.url}/v6/user?$select=username`, { headers: { authorization: 'Bearer a-key-chosen-by-the-operator-000' } });
    expect(await ok.json()).toEqual({ d: [{ username: 'admin' }] });
    const old = await fetch(`${second.ready.url}/v6/user/$count`, { headers: { authorization: `Bearer ${first.ready.adminKey}` } });
    expect(old.status).toBe(200);
    expect(await second.stop()).toBe(0);

    const third = await start(['--data-dir', dataDir]);
    expect(third.ready.adminKey).toBe('a-key-chosen-by-the-operator-000');
    expect(await third.stop()).toBe(0);
  });

  it('--database postgres://... keeps the data in PostgreSQL', async () => {
    const cluster = await startPostgres();
    try {
      const url = await cluster.createDatabase('cli');
      const dataDir = await mkdtemp(join(tmpdir(), 'fleetlab-cloud-cli-'));
      dirs.push(dataDir);
      const run = await start(['--data-dir', dataDir, '--database', url]);
      const auth = { authorization: `Bearer ${run.ready.adminKey}` };
      const created = await fetch(`${run.ready.url}/fleetlab/users`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ username: 'pguser' }) });
      expect(created.status).toBe(201);
      expect(await run.stop()).toBe(0);
      // the record is in PostgreSQL, not in a SQLite file in the data directory
      const again = await start(['--data-dir', dataDir, '--database', url, '--db-pool', '2']);
      const users = await fetch(`${again.ready.url}/v6/user?$select=username&$orderby=username`, { headers: auth });
      expect(await users.json()).toEqual({ d: [{ username: 'admin' }, { username: 'pguser' }] });
      // 16 requests at once open no more than the 2 pooled connections (and the replica bus's own)
      const answers = await Promise.all(Array.from({ length: 16 }, () => fetch(`${again.ready.url}/v6/user/$count`, { headers: auth }).then((r) => r.status)));
      expect(answers).toEqual(Array(16).fill(200));
      const watcher = new pg.Client({ connectionString: url });
      await watcher.connect();
      try {
        const { rows } = await watcher.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
        expect(rows[0]!.n).toBeGreaterThanOrEqual(2);
        expect(rows[0]!.n).toBeLessThanOrEqual(3);
      } finally {
        await watcher.end();
      }
      expect(await again.stop()).toBe(0);
      await expect(stat(join(dataDir, 'cloud.db'))).rejects.toThrow();
    } finally {
      await cluster.stop();
    }
  });
});
