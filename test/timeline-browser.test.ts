/**
 * The device timeline of a failing spec, end to end, in a real browser: `fleetlab/test` runs
 * test/timeline-spec/ (a release, the LED's blink, an update, a wrong expectation) on a
 * simulated device on dockerd; the page its report links is opened in Debian's Chromium,
 * driven by Playwright through `executablePath` (no browser download is reachable here). The
 * lanes, the blink, the update, the failure mark and a journal line's hover text are checked;
 * the screenshot stays in test-results/timeline/.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser } from '@playwright/test';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const CHROMIUM = process.env.FLEETLAB_CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = join(ROOT, 'test-results', 'timeline');

let reportDir: string;
let run: { status: number | null; output: string };
let browser: Browser;

beforeAll(() => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: the timeline page is checked in Debian's Chromium (apt-get install chromium; scripts/provision installs it), or set FLEETLAB_CHROMIUM`);
  reportDir = mkdtempSync(join(tmpdir(), 'fleetlab-timeline-report-'));
  const r = spawnSync(process.execPath, [join(ROOT, 'node_modules/@playwright/test/cli.js'), 'test', '-c', join(ROOT, 'test/timeline-spec/fleetlab.config.ts'), '--project=sim'], {
    cwd: ROOT,
    env: { ...process.env, FLEETLAB_TIMELINE_REPORT: reportDir, FLEETLAB_HIL_ENGINE: 'docker', CI: '' },
    encoding: 'utf8',
    timeout: 240_000,
  });
  run = { status: r.status, output: `${r.stdout}\n${r.stderr}` };
}, 250_000);

afterAll(async () => {
  await browser?.close();
  if (reportDir) rmSync(reportDir, { recursive: true, force: true });
});

/** The timeline pages the run's HTML report links (its data directory holds what it links). */
const reportPages = () => readdirSync(join(reportDir, 'html', 'data')).filter((f) => f.endsWith('.html'));

describe('the device timeline of a failing spec, in Chromium', () => {
  it('is linked from the report of the failed test', () => {
    expect(run.output).toContain('the deliberate failure');
    expect(run.status, run.output).toBe(1);
    expect(reportPages()).toHaveLength(1);
  });

  it('draws every lane, the blink, the update and the failure mark; hover shows a journal line', async () => {
    const file = join(reportDir, 'html', 'data', reportPages()[0]!);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const page = await browser.newPage({ viewport: { width: 1300, height: 600 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    // From disk, as a person opens it; nothing may be fetched.
    page.on('request', (req) => void (req.url().startsWith('file:') || errors.push(`fetched ${req.url()}`)));
    await page.goto(`file://${file}`);

    const lanes = await page.locator('g.lane').evaluateAll((gs) => gs.map((g) => g.getAttribute('data-lane')));
    expect(lanes).toEqual(['led', 'power', 'network', 'containers', 'supervisor', 'steps', 'journal', 'serial', 'cpu', 'rss']);
    expect(await page.locator('[data-toggle]').count()).toBe(lanes.length);
    // The simulated device has no serial console: its lane says so rather than showing nothing.
    expect(await page.locator('[data-lane=serial] text.absent').textContent()).toBe('not provided: target sim has no serial console');

    // The LED lane's level changes: at least the six the spec waited for.
    const led = (await page.locator('[data-lane=led] path.level').getAttribute('data-p'))!.split(' ');
    expect(led.length).toBeGreaterThanOrEqual(7);
    expect(new Set(led.map((p) => p.split(',')[1]))).toEqual(new Set(['0', '1']));

    // The update: release 1's container stopped, release 2's started, on rows of their own.
    const containerMarks = await page.locator('[data-lane=containers] rect.mark').evaluateAll((ms) => ms.map((m) => m.getAttribute('data-text')!));
    expect(containerMarks.some((t) => /_web_1: die \(exit \d+\)$/.test(t))).toBe(true);
    expect(containerMarks.some((t) => /_web_2: start$/.test(t))).toBe(true);
    const deploys = await page.locator('[data-lane=steps] rect.span').evaluateAll((rs) => rs.filter((r) => r.getAttribute('data-text')!.startsWith('harness: deploy')).length);
    expect(deploys).toBe(2);

    // One failure mark, at the end of the test body, with its error.
    const failure = page.locator('g.failure');
    expect(await failure.count()).toBe(1);
    expect(Number(await failure.getAttribute('data-a'))).toBeGreaterThan(Math.max(...led.map((p) => Number(p.split(',')[0]))));
    expect(await page.locator('.failure-text').textContent()).toContain('the deliberate failure');

    // Hover over the supervisor's "listening" journal line shows its text.
    const journal = page.locator('[data-lane=journal] rect.mark');
    expect(await journal.count()).toBeGreaterThan(0);
    const listening = journal.filter({ has: page.locator('xpath=self::*[contains(@data-text, "listening on")]') }).first();
    await listening.hover({ force: true });
    await page.locator('#tip').waitFor({ state: 'visible' });
    expect(await page.locator('#tip').textContent()).toMatch(/^\+\d+\.\d{3} s {2}fleetlab-supervisor\.service: .*listening on http:\/\/127\.0\.0\.1/);

    // A hidden lane goes, and the lanes below move up.
    const height = Number(await page.locator('#plot').getAttribute('height'));
    await page.locator('[data-toggle=journal]').uncheck();
    await page.locator('[data-lane=journal]').waitFor({ state: 'hidden' });
    expect(Number(await page.locator('#plot').getAttribute('height'))).toBeLessThan(height);
    await page.locator('[data-toggle=journal]').check();

    // Zoomed in at the pointer, the axis no longer starts at +0.
    const box = (await page.locator('#plot').boundingBox())!;
    await page.mouse.move(box.x + box.width * 0.7, box.y + 60);
    for (let i = 0; i < 5; i++) await page.mouse.wheel(0, -100);
    await expect.poll(() => page.locator('#axis text').first().textContent()).not.toBe('+0 s');
    await page.mouse.dblclick(box.x + box.width * 0.7, box.y + 60);

    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, 'device-timeline.png'), fullPage: true });
    expect(errors).toEqual([]);
    expect(readFileSync(file, 'utf8')).not.toMatch(/<(script|link|img)[^>]+(src|href)=/);
  });
});
