/**
 * Field bugs replayed (issue 14): a device starts in a state captured from another device and
 * is stuck where that one was, on any target that starts from a bundle (sim, container, qemu).
 * The bundles in ./bundles were captured from container-target devices in three states a
 * field device gets stuck in; `FLEETLAB_KEEP_BUNDLES=hil/specs/bundles npx vitest run
 * test/replay.test.ts -t container` captures them again.
 *
 * Each test compares the replay's `/v2/state/status` with the captured one (without what
 * differs between two devices: ids, times, progress), then shows the stuck point is live.
 */
import { expect, pollUntil, since, test, type Device } from 'fleetlab/test';

interface Status {
  appState: string;
  release?: string;
  containers: Array<{ appId: number; serviceName: string; status: string; imageId: number; containerId?: string }>;
  images: Array<{ name: string; status: string; downloadError?: string }>;
}

const stuck = (s: Status, skip: (line: string) => boolean = () => false) =>
  [`appState ${s.appState}`, `release ${s.release}`, ...s.containers.map((c) => `container ${c.appId}/${c.serviceName} ${c.status} image ${c.imageId}`).sort(), ...s.images.map((i) => `image ${i.name} ${i.status}`).sort()].filter((l) => !skip(l));

const status = async (device: Device) => (await device.status()) as unknown as Status;

// A device per test: each starts from its own bundle.
test.use({ deviceScope: 'test' });

test.describe('an update waiting on a lock the app holds', { annotation: since('9.7.0', 'GET /v2/state/status') }, () => {
  test.use({ fromBundle: './bundles/locked.bundle.tar.gz' });

  test('waits on it again, and goes on once the app lets go; the host named and proxied as it was', async ({ device, api }) => {
    const before = (await device.capturedStatus()) as unknown as Status;
    // The field device's host config (its proxy's password is in no capture).
    expect((await api.hostConfig()).body).toEqual({ network: { hostname: 'field-pi-17', proxy: { type: 'socks5', ip: '10.0.0.9', port: '1080', login: 'fieldops', noProxy: ['10.0.0.0/8'] } } });
    await pollUntil('the captured stuck point', () => status(device), (s) => JSON.stringify(stuck(s)) === JSON.stringify(stuck(before)), { timeoutMs: 120_000 });
    expect(stuck(await status(device))).toEqual(stuck(before));
    await device.files!.remove(device.updateLockPath('worker', 1));
    await device.waitForRelease({ releaseId: 2, services: ['main', 'worker'] }, { timeoutMs: 120_000 });
  });
});

test.describe('a service in a crash loop after a power cut', { annotation: since('9.7.0', 'GET /v2/state/status') }, () => {
  test.use({ fromBundle: './bundles/crash-loop.bundle.tar.gz' });

  test('crash-loops again, and its container is kept, not recreated; its clock two days ahead, as it was', async ({ device }) => {
    const before = (await device.capturedStatus()) as unknown as Status;
    // The supervisor stamps its log lines with its wall clock (pino's `time`).
    const line = (await device.journal({ unit: 'fleetlab-supervisor.service', grep: /"time":\d+/, lines: 50 })).at(-1);
    expect((JSON.parse(line!.message.slice(line!.message.indexOf('{'))) as { time: number }).time).toBeGreaterThan(Date.now() + 2 * 86_400_000 - 600_000);
    // The crasher's own line flips between running and exited as it loops: the rest must match.
    const crasher = (l: string) => /\bcrasher\b/.test(l);
    const first = await pollUntil('the captured stuck point', () => status(device), (s) => JSON.stringify(stuck(s, crasher)) === JSON.stringify(stuck(before, crasher)), { timeoutMs: 120_000 });
    const id = first.containers.find((c) => c.serviceName === 'crasher')?.containerId;
    expect(id, 'the crasher container').toBeTruthy();
    // 'restarting' reads as Running in the status: the loop shows in the journal, a start line each round.
    const starts = async () => (await device.journal({ grep: /^starting$/, lines: 2000 })).length;
    const from = await starts();
    await pollUntil('the crasher starting twice more', starts, (n) => n >= from + 2, { timeoutMs: 120_000 });
    const now = await status(device);
    expect(now.containers.find((c) => c.serviceName === 'crasher')?.containerId, 'the same crasher container').toBe(id);
  });
});

test.describe('an image pull that keeps failing', { annotation: since('9.7.0', 'GET /v2/state/status') }, () => {
  test.use({ fromBundle: './bundles/pull-failing.bundle.tar.gz' });

  test('fails again, and the old release keeps running', async ({ device }) => {
    const before = (await device.capturedStatus()) as unknown as Status;
    const failing = await pollUntil('the pull failing again', () => status(device), (s) => s.images.some((i) => i.downloadError), { timeoutMs: 120_000 });
    expect(failing.images.filter((i) => i.downloadError).map((i) => i.name)).toEqual(before.images.filter((i) => i.status === 'Downloading').map((i) => i.name));
    expect(stuck(await status(device))).toEqual(stuck(before));
  });
});
