/**
 * `fleetlab bundle show` on bundles of stuck devices (issue 14): what the device waited for
 * and the supervisor's last errors come first, read from the captured files alone.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BundleWriter, readBundle } from '../hil/capture/bundle.js';
import { showBundle } from '../hil/capture/show.js';
import { bundleTimeline } from '../hil/capture/timeline.js';
import { runBundleShow } from '../hil/harness/capture-command.js';

const dir = mkdtempSync(join(tmpdir(), 'fleetlab-bundle-show-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function bundleOf(name: string, files: Record<string, unknown>): Promise<string> {
  const out = join(dir, `${name}.tar.gz`);
  const w = await BundleWriter.open(out, { source: { kind: 'api', address: 'http://127.0.0.1:48484' }, redaction: 'default', fleetlab: '0.0.0-test' });
  await w.step('state', async (put) => {
    for (const [file, value] of Object.entries(files)) await put(file, typeof value === 'string' ? value : JSON.stringify(value));
  });
  await w.finish({ complete: true });
  return showBundle(await readBundle(out));
}

const journalLine = (message: string, priority = 6, unit = 'fleetlab-supervisor.service') =>
  JSON.stringify({ MESSAGE: message, PRIORITY: String(priority), _SYSTEMD_UNIT: unit, __REALTIME_TIMESTAMP: '1795650000000000' });

describe('bundle show', () => {
  it('a pull that keeps failing and a service that exited: both are what the device waits for', async () => {
    const shown = await bundleOf('pull', {
      'device/device.json': { status: 'Downloading', commit: 'r1', update_pending: true, update_failed: true, supervisor_version: '0.2.0', os_version: 'Debian' },
      'state/status.json': {
        status: 'success',
        appState: 'applying',
        overallDownloadProgress: 40,
        release: '2',
        containers: [{ appId: 1, serviceName: 'worker', status: 'exited', containerId: 'c'.repeat(64) }],
        images: [
          { appId: 1, serviceName: 'main', name: 'registry/main:2', status: 'Downloading', downloadProgress: 40, downloadError: 'connection reset by peer' },
          { appId: 1, serviceName: 'worker', name: 'registry/worker:2', status: 'Downloading', downloadProgress: 10 },
        ],
      },
      'journal/journal.jsonl': [
        journalLine('Applying target state'),
        journalLine('Failed to download registry/main:2: connection reset by peer', 3),
        journalLine('an app said error', 3, 'app.service'),
        journalLine('Retrying in 4 s'),
      ].join('\n'),
    });
    expect(shown).toContain('device: Downloading, running release r1; update pending, UPDATE FAILED');
    expect(shown).toContain('state engine: success, apps applying, download 40%, release 2');
    expect(shown).toContain(`  app 1 worker: exited (${'c'.repeat(12)})`);
    expect(shown).toContain(
      [
        'waiting for:',
        '  image registry/main:2 of main: download failing (connection reset by peer)',
        '  image registry/worker:2 of worker: Downloading 10%',
        '  service worker of app 1: exited',
      ].join('\n'),
    );
    // Only the supervisor's own errors, with their time; an app's error line is not the supervisor's.
    expect(shown).toContain("last errors in the supervisor's log (newest last):\n  2026-11-25T23:40:00.000Z Failed to download registry/main:2: connection reset by peer\n");
    expect(shown).not.toContain('an app said error');
  });

  it('a pending update with nothing downloading or stopped points at the locks and the log', async () => {
    const shown = await bundleOf('lock', {
      'device/device.json': { status: 'Idle', commit: 'r1', update_pending: true },
      'state/status.json': { status: 'success', appState: 'applying', containers: [{ appId: 1, serviceName: 'main', status: 'Running' }], images: [{ name: 'm:1', serviceName: 'main', status: 'Downloaded' }] },
    });
    expect(shown).toContain('waiting for:\n  an update is pending with nothing downloading or stopped: an update lock, or the apply loop (see the log below)');
    expect(shown).not.toContain('last errors');
  });

  it('a device at its target waits for nothing', async () => {
    const shown = await bundleOf('calm', {
      'device/device.json': { status: 'Idle', commit: 'r1', update_pending: false },
      'state/status.json': { status: 'success', appState: 'applied', containers: [{ appId: 1, serviceName: 'main', status: 'Running' }], images: [] },
    });
    expect(shown).not.toContain('waiting for');
    expect(shown).toContain('complete: the capture ran every step');
  });
});

describe('bundle show --html', () => {
  it("draws a crash-looping device's journal, its containers as the engine dates them and the state at capture", async () => {
    const path = new URL('../hil/specs/bundles/crash-loop.bundle.tar.gz', import.meta.url).pathname;
    const bundle = await readBundle(path);
    const t = bundleTimeline(bundle);
    expect(t.lanes.map((l) => l.id)).toEqual(['containers', 'supervisor', 'journal']);
    const containers = t.lanes[0]!;
    const journal = t.lanes[2]!;
    // Two containers: the crasher restarted twice (counted: the engine dates only its last start) and the host network's.
    expect(containers.kind === 'events' && containers.marks.map((m) => m.text)).toEqual(expect.arrayContaining(['2f7d254_crasher_1: create', '2f7d254_crasher_1: start (restart 2)']));
    expect(journal.kind === 'events' && journal.marks.length).toBe(bundle.text('journal/journal.jsonl').trim().split('\n').length);
    expect(t.end).toBe(Date.parse(bundle.manifest.createdAt) - t.origin + 1);

    const out = join(dir, 'crash-loop.html');
    await runBundleShow(path, { html: out });
    const html = readFileSync(out, 'utf8');
    expect(html.match(/<g class="lane"/g)).toHaveLength(3);
    expect(html).toContain('crasher_1: start (restart 2)');
  });
});
