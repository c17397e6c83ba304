/**
 * The simulated device as a user meets it: the real supervisor process with simulated
 * peers. Blink seen on the GPIO line, a reboot through login1, kill -9 in the middle of an
 * apply, and the journal and log streams.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimDevice } from '../sim/device.js';
import { dockerSocket, twoServiceState } from './helpers/supervisor-fixture.js';
import { deviceHttp } from './helpers/device-http.js';

let device: SimDevice;
let url: string;
let key: string;

beforeAll(async () => {
  device = await SimDevice.start({ port: 0, engine: 'docker', dockerSocket, localMode: true });
  ({ url, apiKey: key } = device.info());
});
afterAll(async () => {
  await device?.stop();
});

const api = deviceHttp(() => ({ url, key }));

/** Bounded poll of /v2/state/status until applied with every service Running. */
async function waitRunning(release: string, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const status = (await api('GET', '/v2/state/status')).json();
      last = JSON.stringify(status);
      if (status.appState === 'applied' && status.release === release && status.containers.length === 2 && status.containers.every((c: { status: string }) => c.status === 'Running')) return status;
    } catch {
      // the supervisor may be restarting
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`not applied within ${timeoutMs} ms: ${last}`);
}

describe('simulated device', () => {
  it('starts with a stored uuid and key and answers /ping', async () => {
    const info = device.info();
    expect(info.uuid).toMatch(/^[0-9a-f]{32}$/);
    expect(info.apiKey).toMatch(/^[0-9a-f]{32}$/);
    expect(await (await fetch(`${url}/ping`)).text()).toBe('OK');
  });

  it('accepts a two-service local target state and runs it', async () => {
    const res = await api('POST', '/v2/local/target-state', { local: twoServiceState() });
    expect(res.status).toBe(200);
    await waitRunning('1');
  });

  it('blinks the LED: 200 ms on, 200 ms off for 15 s, then off', async () => {
    device.gpio.clearTransitions();
    const started = performance.timeOrigin + performance.now();
    expect((await api('POST', '/v1/blink')).status).toBe(200);
    await new Promise((r) => setTimeout(r, 16_500));
    const transitions = device.gpio.transitions(device.ledGpio);
    const ons = transitions.filter((t) => t.value === 1);
    expect(ons.length).toBeGreaterThanOrEqual(35);
    expect(ons.length).toBeLessThanOrEqual(39);
    const gaps = transitions.slice(1).map((t, i) => t.at - transitions[i]!.at).sort((a, b) => a - b);
    const median = gaps[Math.floor(gaps.length / 2)]!;
    expect(median).toBeGreaterThan(150);
    expect(median).toBeLessThan(300);
    expect(transitions.at(-1)!.value).toBe(0);
    expect(transitions.at(-1)!.at - started).toBeLessThan(16_000);
    expect(device.gpio.value(device.ledGpio)).toBe(0);
  }, 40_000);

  it('journals the supervisor and the containers; journal-logs reads them back', async () => {
    const supervisor = await api('POST', '/v2/journal-logs', { unit: 'fleetlab-supervisor.service', format: 'cat' });
    expect(supervisor.status).toBe(200);
    expect(supervisor.text).toMatch(/listening on/);
    const containerId = (await api('GET', '/v2/containerId?service=worker')).json().containerId as string;
    // The sim journals container output within a second or two (bounded wait).
    let text = '';
    for (let i = 0; i < 50 && !/tick/.test(text); i++) {
      text = (await api('POST', '/v2/journal-logs', { containerId, format: 'cat', count: 5 })).text;
      if (!/tick/.test(text)) await new Promise((r) => setTimeout(r, 200));
    }
    expect(text).toMatch(/test-app v2: tick/);
    expect(text).not.toMatch(/test-app v1/);
  });

  it('streams service and supervisor logs as NDJSON on /v2/local/logs', async () => {
    const abort = new AbortController();
    const res = await fetch(`${url}/v2/local/logs`, { signal: abort.signal });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let buffered = '';
    const lines: Array<{ message: string; timestamp: number; serviceName: string }> = [];
    for (let i = 0; i < 100 && !lines.some((l) => l.serviceName === 'main'); i++) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += Buffer.from(value).toString();
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      lines.push(...parts.filter(Boolean).map((p) => JSON.parse(p)));
    }
    abort.abort();
    const line = lines.find((l) => l.serviceName === 'main')!;
    expect(line.message).toMatch(/test-app v1/);
    expect(typeof line.timestamp).toBe('number');
  });

  it('reboot through login1: the supervisor restarts, a stopped service runs again, the hostname stays', async () => {
    expect((await api('PATCH', '/v1/device/host-config', { network: { hostname: 'rebooted-box' } })).status).toBe(200);
    expect((await api('POST', '/v2/applications/1/stop-service', { serviceName: 'worker' })).status).toBe(200);
    const pid = device.supervisorPid;
    const rebooted = new Promise<void>((r) => device.once('reboot', () => r()));
    const res = await api('POST', '/v1/reboot');
    expect(res.status).toBe(202);
    expect(res.json()).toEqual({ Data: 'OK', Error: '' });
    await rebooted;
    expect(device.supervisorPid).not.toBe(pid);
    expect(device.host.powerRequests.map((p) => p.action)).toContain('reboot');
    await waitRunning('1');
    expect((await api('GET', '/v1/device/host-config')).json().network.hostname).toBe('rebooted-box');
    expect(device.host.hostname).toBe('rebooted-box');
  }, 90_000);

  it('kill -9 during an apply: after restart nothing is lost and it converges', async () => {
    const res = await api('POST', '/v2/local/target-state', { local: twoServiceState({ releaseId: 2, mainImage: 'fleetlab/test-app:2' }) });
    expect(res.status).toBe(200);
    // The power cut lands while the release is being replaced.
    process.kill(device.supervisorPid!, 'SIGKILL');
    await device.reboot();
    const stored = JSON.parse(readFileSync(join(device.info().dataDir, 'supervisor', 'device.json'), 'utf8'));
    expect(stored.localTarget.apps[0].releaseId).toBe(2);
    expect(stored.deviceKey).toBe(key);
    const status = await waitRunning('2');
    expect(status.containers.map((c: { serviceName: string }) => c.serviceName).sort()).toEqual(['main', 'worker']);
    const main = (await api('GET', '/v2/applications/state')).json().myapp.services.main;
    expect(main).toEqual({ status: 'Running', releaseId: 2, downloadProgress: null });
  }, 90_000);

  it('a power cut: the containers die at once and the supervisor dies with them; after it, the services run again with their lock directories made again by the supervisor (1777, this user\'s), not by the engine', async () => {
    const lockDirs = () => ['main', 'worker'].map((s) => join(device.lockRoot, '1', s));
    await waitRunning('2');
    const before = (await api('GET', '/v2/state/status')).json().containers.map((c: { containerId: string }) => c.containerId);
    process.kill(device.supervisorPid!, 'SIGKILL');
    await device.reboot({ powerLost: true });
    const status = await waitRunning('2');
    // Kept, not recreated: a power cut leaves the containers on disk, exited, and the boot starts them.
    expect(status.containers.map((c: { containerId: string }) => c.containerId).sort()).toEqual([...before].sort());
    for (const dir of lockDirs()) {
      const st = statSync(dir);
      expect({ dir, mode: (st.mode & 0o7777).toString(8), uid: st.uid }).toEqual({ dir, mode: '1777', uid: process.getuid!() });
    }
  }, 90_000);
});
