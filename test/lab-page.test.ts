/**
 * The lab page (`fleetlab lab serve`, hil/lab/lab-serve.ts) in a real browser: Debian's
 * Chromium driven by Playwright through `executablePath`. Over a lease store of the test's own
 * (SQLite in a temp directory) and two boards nobody needs to reach, the page shows a lease
 * appear with its holder and time left and then expire, a board quarantined with the reason,
 * and, with the admin key typed in, puts the board back and ends a lease; without the key, or on
 * a read-only page, both are refused. Only the page's own server is asked for anything.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from '@playwright/test';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLab, type OpenLab } from '../hil/lab/lab-command.js';
import { buildLabServer } from '../hil/lab/lab-serve.js';

const CHROMIUM = process.env.FLEETLAB_CHROMIUM ?? '/usr/bin/chromium';
const ADMIN_KEY = 'test-admin-key-4f1c';

describe('the lab page, in Chromium', () => {
  let dir: string;
  let open: OpenLab;
  let app: FastifyInstance;
  let url: string;
  let browser: Browser;
  let page: Page;
  const foreign: string[] = [];
  const errors: string[] = [];

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: the lab page is checked in Debian's Chromium (apt-get install chromium; scripts/provision installs it), or set FLEETLAB_CHROMIUM`);
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-page-'));
    const labFile = join(dir, 'fleetlab.lab.yaml');
    const board = (name: string, port: number) => `  - name: ${name}\n    tags: [rpi4]\n    host: 127.0.0.1\n    sshPort: ${port}\n    privateKey: ./lab-key\n`;
    await writeFile(labFile, `leases:\n  store: sqlite:leases.db\n  ttlSeconds: 60\nhealth: {}\nboards:\n${board('pi-a', 1)}${board('pi-b', 2)}`);
    open = await openLab(labFile);
    app = buildLabServer(open.store, open.lab, { adminKey: ADMIN_KEY });
    url = await app.listen({ host: '127.0.0.1', port: 0 });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await browser.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('request', (r) => void (r.url().startsWith(url) || foreign.push(r.url())));
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await app?.close();
    await open?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const row = (board: string) => page.locator(`tr[data-board="${board}"]`);

  it('shows every board, a lease with its holder and time left that then expires, and a quarantine with its reason', async () => {
    await page.goto(`${url}/`);
    await expect.poll(() => page.locator('tr[data-board]').count(), { timeout: 5000 }).toBe(2);
    expect(await row('pi-a').getAttribute('data-state')).toBe('free');
    expect(await row('pi-b').locator('.check').textContent()).toBe('never checked');

    // A lease of 8 s nobody renews: it appears, counts down, and lapses, with no reload.
    await open.store.acquire(['pi-a'], 'ci@runner-1 pid 4121', 8000);
    await expect.poll(() => row('pi-a').getAttribute('data-state'), { timeout: 5000 }).toBe('leased');
    expect(await row('pi-a').locator('.holder').textContent()).toBe('ci@runner-1 pid 4121');
    expect(await row('pi-a').locator('.detail').textContent()).toMatch(/^[0-8] s left \(until \d{4}-\d\d-\d\dT[\d:]+Z, renewed while it runs\)$/);

    await open.store.recordCheck('pi-b', { ok: false, failedStep: 'supervisor', reason: 'supervisor: connect ECONNREFUSED 127.0.0.1:48484', steps: [] }, 'ops@lab pid 7 (lab watch)');
    await expect.poll(() => row('pi-b').getAttribute('data-state'), { timeout: 5000 }).toBe('quarantined');
    expect(await row('pi-b').locator('.detail').textContent()).toMatch(/^health check failed at supervisor: connect ECONNREFUSED 127\.0\.0\.1:48484 \(since .*Z\)$/);
    expect(await row('pi-b').locator('.check').textContent()).toMatch(/^failed at supervisor, \d+ s ago-$/);

    await expect.poll(() => row('pi-a').getAttribute('data-state'), { timeout: 15_000 }).toBe('free');
    expect(await row('pi-a').locator('.holder').textContent()).toBe('');
  });

  it('with the admin key, puts a quarantined board back and ends a lease, both logged as the page', async () => {
    expect(await page.locator('button[data-action]').count()).toBe(0);
    await page.fill('#admin-key', ADMIN_KEY);
    await page.click('#key-form button[type=submit]');
    await row('pi-b').locator('button[data-action=online]').click();
    await expect.poll(() => page.locator('#message').textContent(), { timeout: 5000 }).toMatch(/^pi-b is back in the lab \(logged as online by lab page \(127\.0\.0\.1\)\)$/);
    await expect.poll(() => row('pi-b').getAttribute('data-state'), { timeout: 5000 }).toBe('free');

    await open.store.acquire(['pi-a'], 'stuck-run', 600_000);
    await row('pi-a').locator('button[data-action=release]').click();
    await expect.poll(() => page.locator('#message').textContent(), { timeout: 5000 }).toMatch(/^pi-a: ended the lease of stuck-run \(logged as forced by lab page/);
    await expect.poll(() => row('pi-a').getAttribute('data-state'), { timeout: 5000 }).toBe('free');
    await expect.poll(() => page.locator('#log li').first().textContent(), { timeout: 5000 }).toMatch(/pi-a {2}forced {2}stuck-run {2}\(released by lab page/);
    expect(errors).toEqual([]);
    expect(foreign).toEqual([]);
  });

  it("shows each board's test outcomes over its last runs, a board-suspect count marked", async () => {
    expect(await row('pi-a').locator('.results').textContent()).toBe('no runs recorded');
    await open.store.recordAttempt({ run: 'r1', board: 'pi-a', test: 't1', title: 'a spec', attempt: 0, outcome: 'device-failure' });
    await open.store.recordAttempt({ run: 'r1', board: 'pi-b', test: 't1', title: 'a spec', attempt: 1, outcome: 'passed' });
    await open.store.recordAttempt({ run: 'r1', board: 'pi-b', test: 't2', title: 'another spec', attempt: 0, outcome: 'infrastructure-failure' });
    await expect.poll(() => row('pi-a').locator('.results').textContent(), { timeout: 5000 }).toBe('0 passed, 0 device, 0 infrastructure, 1 board-suspectlast 1 run');
    expect(await row('pi-a').locator('.results .suspect').textContent()).toBe('1 board-suspect');
    expect(await row('pi-b').locator('.results').textContent()).toBe('1 passed, 0 device, 1 infrastructure, 0 board-suspectlast 1 run');
    expect(await row('pi-b').locator('.results .suspect').count()).toBe(0);
  });

  it('refuses online and release without the key, on a read-only page, and for a board the lab does not have', async () => {
    const post = (path: string, key?: string) => app.inject({ method: 'POST', url: path, headers: key ? { authorization: `Bearer ${key}` } : {} });
    const wrong = await post('/api/boards/pi-a/online', 'nope');
    expect([wrong.statusCode, wrong.json()]).toEqual([401, { status: 'failed', message: 'Unauthorized: wrong or missing admin key' }]);
    expect((await post('/api/boards/pi-z/online', ADMIN_KEY)).statusCode).toBe(404);
    const readOnly = buildLabServer(open.store, open.lab);
    try {
      const r = await readOnly.inject({ method: 'POST', url: '/api/boards/pi-a/release', headers: { authorization: `Bearer ${ADMIN_KEY}` } });
      expect([r.statusCode, r.json().message]).toEqual([401, 'this lab page is read-only: it was started without FLEETLAB_LAB_ADMIN_KEY']);
      expect((await readOnly.inject({ method: 'GET', url: '/api/state' })).json()).toMatchObject({ admin: false, checksOn: true, boards: [{ name: 'pi-a' }, { name: 'pi-b' }] });
    } finally {
      await readOnly.close();
    }
  });
});
