import { describe, expect, it } from 'vitest';
import { backoffDelay } from '../src/supervisor/adapters/cloud/backoff.js';
import { changedFields, currentReport } from '../src/supervisor/adapters/cloud/report.js';
import type { DeviceView } from '../src/supervisor/state/status.js';

describe('backoffDelay (full jitter)', () => {
  const policy = { baseMs: 500, maxMs: 8_000 };

  it('draws from [0, base * 2^(attempt-1)] capped at max', () => {
    expect(backoffDelay(1, policy, () => 0.999)).toBe(499);
    expect(backoffDelay(2, policy, () => 0.999)).toBe(999);
    expect(backoffDelay(4, policy, () => 0.999)).toBe(3996);
    expect(backoffDelay(5, policy, () => 0.999)).toBe(7992);
    expect(backoffDelay(50, policy, () => 0.999)).toBe(7992);
    expect(backoffDelay(3, policy, () => 0)).toBe(0);
  });

  it('spreads a fleet: 1000 devices on their 4th retry land in distinct 100 ms buckets', () => {
    let seed = 42;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const buckets = new Set(Array.from({ length: 1000 }, () => Math.floor(backoffDelay(4, policy, random) / 100)));
    // 4000 ms window / 100 ms buckets = 40 buckets, all of them hit.
    expect(buckets.size).toBe(40);
  });
});

const view = (status: DeviceView['status'], progress: number | null): DeviceView => ({
  status,
  appState: status === 'Idle' ? 'applied' : 'applying',
  downloadProgress: progress,
  services: [
    { appId: 1, appName: 'demo', serviceName: 'main', serviceId: 1, imageId: 1, image: 'fleetlab/test-app:1', releaseId: 7, status: status === 'Idle' ? 'Running' : 'Downloading', downloadProgress: progress },
  ],
  containers: [],
  images: [],
  commits: new Map([[1, 'c7']]),
});
const ctx = { osVersion: 'Debian 12', supervisorVersion: '0.1.0', ipAddress: '10.0.0.2', macAddress: 'AA', apiPort: 48484, updateFailed: false };

describe('state report', () => {
  it('reports device and per-service status with download progress', () => {
    const report = currentReport(view('Downloading', 40), ctx);
    expect(report).toMatchObject({ status: 'Downloading', download_progress: 40, update_pending: true, api_port: 48484 });
    expect(report.apps).toEqual({ '1': { release_id: 7, commit: 'c7', services: { main: { image: 'fleetlab/test-app:1', image_id: 1, status: 'Downloading', download_progress: 40, release_id: 7 } } } });
  });

  it('sends only what changed since the last acknowledged report', () => {
    const first = currentReport(view('Downloading', 40), ctx);
    expect(changedFields({}, first)).toEqual(first);
    expect(changedFields(first, first)).toEqual({});
    const done = currentReport(view('Idle', null), ctx);
    const diff = changedFields(first, done);
    expect(Object.keys(diff).sort()).toEqual(['apps', 'download_progress', 'status', 'update_pending']);
    expect(diff.status).toBe('Idle');
    expect(diff.download_progress).toBeNull();
  });
});
