/**
 * POST /v2/journal-logs (docs/decisions.md item 12) and the local-mode log stream, read over the wire:
 * count, unit, containerId, since/until, format, follow (read a few lines, then go away),
 * and 400s for bad fields.
 */
import { singleServiceRelease, waitRunning, containerOf } from '../lib/apps.js';
import { expect, pollUntil, scaled, since, test, type DeviceApi, type HttpStream } from 'fleetlab/test';

type Entry = Record<string, unknown> & { MESSAGE?: unknown; _SYSTEMD_UNIT?: string; __REALTIME_TIMESTAMP: string };

const jsonLines = (text: string) => text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Entry);

/** The unit the supervisor's own output is journalled under, found from its start-up line. */
async function supervisorUnit(api: DeviceApi): Promise<string> {
  const entries = jsonLines((await api.journalLogs({ format: 'json', count: 500 })).text);
  // Its own line: on a board sshd also says "Server listening on".
  const unit = entries.find((e) => /Supervisor \S+ listening on/.test(String(e.MESSAGE)))?._SYSTEMD_UNIT;
  expect(unit, 'the supervisor journals its start-up line under a unit').toBeTruthy();
  return unit!;
}

/** Makes the supervisor journal `n` lines ("Hostname set to ..."), one second apart at most. */
async function supervisorLines(api: DeviceApi, n: number): Promise<string[]> {
  const names: string[] = [];
  for (let i = 0; i < n; i++) {
    const name = `hil-line-${i}-${Date.now().toString(36)}`;
    expect((await api.patchHostConfig({ network: { hostname: name } })).status).toBe(200);
    names.push(name);
  }
  return names;
}

/** Reads `stream` until `done(text so far)` or `timeoutMs`; returns the text. */
async function readUntil(stream: HttpStream, done: (text: string) => boolean, timeoutMs: number): Promise<string> {
  let text = '';
  const timer = setTimeout(() => void stream.close(), scaled(timeoutMs));
  try {
    for await (const chunk of stream.chunks()) {
      text += chunk;
      if (done(text)) break;
    }
  } finally {
    clearTimeout(timer);
  }
  return text;
}

test('count, unit and format: the last N entries of one unit, as JSON or plain messages', { tag: '@smoke', annotation: since('10.3.0', 'format in journal logs') }, async ({ api }) => {
  const unit = await supervisorUnit(api);
  const names = await supervisorLines(api, 4);
  const res = await api.journalLogs({ unit, count: 3, format: 'json' });
  expect(res.status).toBe(200);
  const entries = jsonLines(res.text);
  expect(entries).toHaveLength(3);
  // What `journalctl --unit` matches: the unit's own output, and systemd's lines about it
  // (PID 1's "Started ..." carry UNIT=, their _SYSTEMD_UNIT is init.scope).
  for (const e of entries) expect([e._SYSTEMD_UNIT, e.UNIT, e.OBJECT_SYSTEMD_UNIT]).toContain(unit);
  expect(String(entries.at(-1)!.MESSAGE)).toContain(`Hostname set to ${names.at(-1)}`);
  const cat = await api.journalLogs({ unit, count: 3, format: 'cat' });
  expect(cat.text.trimEnd().split('\n')).toEqual(entries.map((e) => String(e.MESSAGE)));
  const short = await api.journalLogs({ unit, count: 1 });
  expect(short.status).toBe(200);
  expect(short.text.trimEnd().split('\n').at(-1)).toContain(String(entries.at(-1)!.MESSAGE));
});

test('since and until select by time, in journalctl formats', { annotation: since('14.7.0', 'since and until in journal logs') }, async ({ api }) => {
  const unit = await supervisorUnit(api);
  await supervisorLines(api, 2);
  const all = jsonLines((await api.journalLogs({ unit, format: 'json' })).text);
  expect(all.length).toBeGreaterThan(1);
  const firstUs = Number(all[0]!.__REALTIME_TIMESTAMP);
  const lastUs = Number(all.at(-1)!.__REALTIME_TIMESTAMP);
  // `@<seconds>` is journalctl's epoch form; bounds are inclusive.
  const past = await api.journalLogs({ unit, format: 'json', until: '2001-01-01 00:00:00' });
  expect(past.status).toBe(200);
  expect(jsonLines(past.text)).toEqual([]);
  const future = await api.journalLogs({ unit, format: 'json', since: '2099-01-01' });
  expect(jsonLines(future.text)).toEqual([]);
  const fromLast = jsonLines((await api.journalLogs({ unit, format: 'json', since: `@${(lastUs / 1e6).toFixed(6)}` })).text);
  expect(fromLast.length).toBeGreaterThanOrEqual(1);
  expect(fromLast.every((e) => Number(e.__REALTIME_TIMESTAMP) >= lastUs)).toBe(true);
  const untilFirst = jsonLines((await api.journalLogs({ unit, format: 'json', until: `@${(firstUs / 1e6).toFixed(6)}` })).text);
  expect(untilFirst.every((e) => Number(e.__REALTIME_TIMESTAMP) <= firstUs)).toBe(true);
  expect(untilFirst.length).toBeGreaterThanOrEqual(1);
  const reversed = await api.call<{ message: string }>('POST', '/v2/journal-logs', { since: '2099-01-01', until: '2001-01-01' });
  expect(reversed.status).toBe(400);
});

test('follow streams new entries as they are written; the client can go away', { annotation: since('10.3.0', 'format in journal logs') }, async ({ api }) => {
  const unit = await supervisorUnit(api);
  const stream = await api.journalLogsStream({ unit, follow: true, count: 1, format: 'cat' });
  expect(stream.status).toBe(200);
  const marker = `hil-follow-${Date.now().toString(36)}`;
  // The supervisor journals "Hostname set to <name>" when the hostname changes.
  const reading = readUntil(stream, (t) => t.includes(marker), 20_000);
  // Half a second for the follow to be reading before the change: a delay, not a state to poll.
  await new Promise((r) => setTimeout(r, 500));
  expect((await api.patchHostConfig({ network: { hostname: marker } })).status).toBe(200);
  const text = await reading;
  await stream.close();
  expect(text).toContain(`Hostname set to ${marker}`);
  // Going away leaves the device answering.
  expect((await api.ping()).status).toBe(200);
  expect((await api.journalLogs({ unit, count: 1, format: 'cat' })).status).toBe(200);
});

test('containerId selects one container\'s output', { annotation: since('10.3.0', 'format in journal logs') }, async ({ api, device }) => {
  expect((await api.setLocalTargetState(singleServiceRelease(device.api.identity.vendor))).status).toBe(200);
  await waitRunning(api, '1', ['solo']);
  const solo = await containerOf(api, 'solo');
  // The test app logs a line every 2 s; the journal gets it within a few seconds (bounded).
  const text = await pollUntil('container output in the journal', async () => (await api.journalLogs({ containerId: solo!.id, format: 'cat', count: 5 })).text, (t) => /tick/.test(t), { timeoutMs: 20_000 });
  expect(text).toMatch(/test-app v1/);
  const unit = await supervisorUnit(api);
  expect((await api.journalLogs({ containerId: solo!.id, unit, format: 'cat' })).text).not.toMatch(/listening on/);
});

test('bad fields are a 400 naming them', { annotation: since('14.7.0', 'since and until in journal logs') }, async ({ api }) => {
  const cases: Array<[unknown, RegExp]> = [
    [{ count: 0 }, /count/],
    [{ count: 'ten' }, /count/],
    [{ count: 1.5 }, /count/],
    [{ unit: '--help' }, /unit/],
    [{ containerId: '-x' }, /containerId/],
    [{ format: 'xml' }, /format/],
    [{ since: 'yesterday-ish' }, /since/],
    [{ until: 'not a time' }, /until/],
    [{ follow: 'yes' }, /follow/],
  ];
  for (const [body, message] of cases) {
    const res = await api.call<{ status: string; message: string }>('POST', '/v2/journal-logs', body);
    expect(res.status, JSON.stringify(body)).toBe(400);
    expect(res.body).toEqual({ status: 'failed', message: expect.stringMatching(message) });
  }
});

test('the journal protocol and the API read the same journal', { tag: '@smoke', annotation: since('10.3.0', 'format in journal logs') }, async ({ api, device, needs }) => {
  needs('journal');
  const unit = await supervisorUnit(api);
  const viaApi = jsonLines((await api.journalLogs({ unit, format: 'json', count: 5 })).text).map((e) => String(e.MESSAGE));
  const viaProtocol = (await device.journal({ unit, lines: 5 })).map((e) => e.message);
  expect(viaProtocol).toEqual(viaApi);
});

test('GET /v2/local/logs streams NDJSON lines from the services and the supervisor', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ api, device }) => {
  expect((await api.setLocalTargetState(singleServiceRelease(device.api.identity.vendor))).status).toBe(200);
  await waitRunning(api, '1', ['solo']);
  const stream = await api.localLogsStream();
  expect(stream.status).toBe(200);
  const text = await readUntil(stream, (t) => t.split('\n').slice(0, -1).some((l) => JSON.parse(l).serviceName === 'solo'), 20_000);
  await stream.close();
  const lines = text.split('\n').filter(Boolean).flatMap((l) => { try { return [JSON.parse(l) as { message: string; timestamp: number; serviceName: string }]; } catch { return []; } });
  const solo = lines.find((l) => l.serviceName === 'solo');
  expect(solo, 'a line from the solo service').toBeTruthy();
  expect(solo!.message).toMatch(/test-app v1/);
  expect(typeof solo!.timestamp).toBe('number');
});
