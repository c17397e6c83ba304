import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { execa } from 'execa';
import { FleetlabError } from '../src/errors.js';
import { createJournalAdapter, journalFormats } from '../src/supervisor/adapters/journal.js';
import type { JournalQuery } from '../src/supervisor/adapters/ports.js';
import { containerLogMeta, startJournalSim, supervisorUnit, type JournalSim } from '../sim/journal/journal-sim.js';

const containerX = { id: 'a1'.repeat(32), name: 'main_1_1', imageName: 'registry/main:1' };
const containerY = { id: 'b2'.repeat(32), name: 'sidecar_2_1' };
const at = (minute: number) => new Date(Date.UTC(2024, 2, 1, 10, minute, 0));

async function readAll(stream: Readable | Promise<Readable>): Promise<string> {
  let text = '';
  for await (const chunk of await stream) text += String(chunk);
  return text;
}

const lines = (text: string) => text.split('\n').filter((line) => line.length > 0);

async function expectBadRequest(run: () => unknown, field: string): Promise<void> {
  let caught: unknown;
  try {
    await run();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(FleetlabError);
  expect((caught as FleetlabError).code).toBe('SUP_ERR_BAD_REQUEST');
  expect((caught as FleetlabError).message).toContain(field);
}

describe('journal adapter over the simulated journal', () => {
  let directory: string;
  let sim: JournalSim;
  let adapter: ReturnType<typeof createJournalAdapter>;
  const query = (q: JournalQuery) => readAll(adapter.stream(q, new AbortController().signal));

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'fleetlab-journal-'));
    sim = await startJournalSim({ directory });
    adapter = createJournalAdapter({ directory });
    const appA = { unit: 'app-a.service', identifier: 'app-a' };
    const appB = { unit: 'app-b.service', identifier: 'app-b' };
    const x = containerLogMeta({ ...containerX, engineUnit: 'docker.service' });
    const y = containerLogMeta(containerY);
    await sim.write({ ...appA, message: 'a0', timestamp: at(0) });
    await sim.write({ ...appB, message: 'b0', timestamp: at(1) });
    await sim.write({ ...appA, message: 'a1', timestamp: at(2) });
    await sim.write({ ...x, message: 'x0', timestamp: at(3) });
    await sim.write({ ...appB, message: 'b1', timestamp: at(4) });
    await sim.write({ ...y, message: 'y0', timestamp: at(5), priority: 3 });
    await sim.write({ ...appA, message: 'multi\nline', timestamp: at(6) });
    await sim.write({ ...appA, message: 'ring\x07bell', timestamp: at(7) });
    await sim.write({ ...x, message: 'x1', timestamp: at(8), fields: { ...x.fields, TRACE_ID: 't-1' } });
    await sim.pipeLines(Readable.from(['sup line 1\nsup li', 'ne 2\n', 'tail']), {
      unit: supervisorUnit,
      identifier: 'fleetlab-supervisor',
      pid: process.pid,
    });
    await sim.flush();
  });

  afterAll(async () => {
    await sim?.close();
    if (directory) await rm(directory, { recursive: true, force: true });
  });

  it('count returns the last N entries', async () => {
    expect(lines(await query({ count: 3, format: 'cat' }))).toEqual(['sup line 1', 'sup line 2', 'tail']);
  });

  it('filters by unit', async () => {
    expect(lines(await query({ unit: 'app-b.service', format: 'cat' }))).toEqual(['b0', 'b1']);
    expect(lines(await query({ unit: supervisorUnit, format: 'cat' }))).toEqual(['sup line 1', 'sup line 2', 'tail']);
  });

  it('a unit pattern matches units by glob; one that matches no unit shows nothing, as a name that matches none does', async () => {
    expect(lines(await query({ unit: 'app-?.service', format: 'cat' }))).toEqual(['a0', 'b0', 'a1', 'b1', 'multi', 'line', 'ring\x07bell']);
    // journalctl itself exits 1 here ("Failed to add filter for units"); the fuzz suite found the 500 it made.
    expect(await query({ unit: 'no-such-*.service', format: 'cat' })).toBe('');
    expect(await query({ unit: '[', format: 'cat' })).toBe('');
  });

  it('following a unit pattern that matches no unit is a bad request: the pattern is not matched again later', async () => {
    await expectBadRequest(() => query({ unit: 'no-such-*.service', follow: true }), 'unit "no-such-*.service" matches no unit');
  });

  it('filters by container id, full or 12-digit', async () => {
    expect(lines(await query({ containerId: containerX.id, format: 'cat' }))).toEqual(['x0', 'x1']);
    expect(lines(await query({ containerId: containerX.id.slice(0, 12), format: 'cat' }))).toEqual(['x0', 'x1']);
    expect(lines(await query({ containerId: containerY.id, format: 'cat' }))).toEqual(['y0']);
  });

  it('a scope returns only its containers, whatever the query names', async () => {
    const onlyX = { containerIds: [containerX.id] };
    const scopedQuery = (q: JournalQuery) => readAll(adapter.stream(q, new AbortController().signal, onlyX));
    expect(lines(await scopedQuery({ format: 'cat' }))).toEqual(['x0', 'x1']);
    // Another container's id, full (journalctl would OR it with the scope's) or short: nothing.
    expect(await scopedQuery({ containerId: containerY.id, format: 'cat' })).toBe('');
    expect(await scopedQuery({ containerId: containerY.id.toUpperCase(), format: 'cat' })).toBe('');
    expect(await scopedQuery({ containerId: containerY.id.slice(0, 12), format: 'cat' })).toBe('');
    expect(lines(await scopedQuery({ containerId: containerX.id.slice(0, 12), format: 'cat' }))).toEqual(['x0', 'x1']);
    // A unit is ANDed with the scope: the host's units stay out of reach.
    expect(await scopedQuery({ unit: 'app-a.service', format: 'cat' })).toBe('');
    expect(lines(await scopedQuery({ unit: 'docker.service', format: 'cat' }))).toEqual(['x0', 'x1']);
    expect(lines(await scopedQuery({ count: 1, format: 'cat' }))).toEqual(['x1']);
    // A scope with no container reads nothing, and runs no journalctl.
    const none = await adapter.stream({ format: 'cat' }, new AbortController().signal, { containerIds: [] });
    expect(none.pid).toBeUndefined();
    expect(await readAll(none)).toBe('');
  });

  it('writes the docker journald driver fields for container lines', async () => {
    const [entry] = lines(await query({ containerId: containerX.id, format: 'json', count: 1 })).map((l) => JSON.parse(l));
    expect(entry).toMatchObject({
      MESSAGE: 'x1',
      CONTAINER_ID: containerX.id.slice(0, 12),
      CONTAINER_ID_FULL: containerX.id,
      CONTAINER_NAME: 'main_1_1',
      CONTAINER_TAG: containerX.id.slice(0, 12),
      SYSLOG_IDENTIFIER: containerX.id.slice(0, 12),
      IMAGE_NAME: 'registry/main:1',
      TRACE_ID: 't-1',
      _SYSTEMD_UNIT: 'docker.service',
      _BOOT_ID: sim.bootId,
    });
  });

  it('since and until bound the entries (both inclusive)', async () => {
    const text = await query({ since: '2024-03-01 10:01:00 UTC', until: '2024-03-01 10:04:00 UTC', format: 'cat' });
    expect(lines(text)).toEqual(['b0', 'a1', 'x0', 'b1']);
  });

  it('json output parses, one object per line', async () => {
    const entries = lines(await query({ unit: 'app-a.service', format: 'json' })).map((l) => JSON.parse(l));
    expect(entries.map((e) => e.MESSAGE)).toEqual(['a0', 'a1', 'multi\nline', [...Buffer.from('ring\x07bell')]]);
    expect(entries[0]).toMatchObject({ _SYSTEMD_UNIT: 'app-a.service', SYSLOG_IDENTIFIER: 'app-a', PRIORITY: '6', _HOSTNAME: 'fleetlab-sim' });
    expect(entries[0].__REALTIME_TIMESTAMP).toBe(String(at(0).getTime() * 1000));
  });

  it('short-iso prefixes a timestamp and the identifier, cat prints the bare message', async () => {
    const cat = lines(await query({ unit: 'app-b.service', format: 'cat' }));
    const iso = lines(await query({ unit: 'app-b.service', format: 'short-iso' }));
    expect(cat).toEqual(['b0', 'b1']);
    expect(iso).toHaveLength(2);
    iso.forEach((line, i) => {
      expect(line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} fleetlab-sim app-b: /);
      expect(line.endsWith(`: ${cat[i]}`)).toBe(true);
    });
  });

  it('a multi-line message round-trips', async () => {
    const [entry] = lines(await query({ unit: 'app-a.service', since: '2024-03-01 10:06:00 UTC', until: '2024-03-01 10:06:00 UTC', format: 'json' })).map((l) => JSON.parse(l));
    expect(entry.MESSAGE).toBe('multi\nline');
  });

  it('all shows unprintable messages in full', async () => {
    const q: JournalQuery = { unit: 'app-a.service', since: '2024-03-01 10:07:00 UTC', until: '2024-03-01 10:07:00 UTC' };
    expect(await query(q)).toContain('[9B blob data]');
    const full = await query({ ...q, all: true });
    expect(full).toContain('ring\x07bell');
    expect(full).not.toContain('blob data');
  });

  it('every format the adapter accepts is one journalctl knows', async () => {
    const { stdout } = await execa('journalctl', ['--output=help']);
    const known = lines(stdout);
    for (const format of journalFormats) expect(known).toContain(format);
  });

  it.each<[JournalQuery, string]>([
    [{ count: 0 }, 'count must be a positive integer'],
    [{ count: -2 }, 'count must be a positive integer'],
    [{ count: 1.5 }, 'count must be a positive integer'],
    [{ count: '5' as unknown as number }, 'count must be a positive integer'],
    // Found by the fuzz suite: journalctl reads --lines into an int and failed on 2^31 (a 500).
    [{ count: 2 ** 31 }, 'count must be at most 2147483647'],
    [{ unit: '--system' }, 'unit'],
    [{ unit: 'a\nb' }, 'unit'],
    [{ unit: 'a\0b' }, 'unit'],
    [{ unit: 'u'.repeat(257) }, 'unit'],
    [{ unit: '' }, 'unit'],
    [{ containerId: '-rf' }, 'containerId'],
    [{ containerId: 'f'.repeat(65) }, 'containerId'],
    [{ since: '-1h' }, 'since'],
    // Found by the fuzz suite: journalctl failed on a blank time and the API answered 500.
    [{ since: ' ' }, 'since'],
    [{ until: '\t' }, 'until'],
    [{ since: 'yesterday\n--merge' }, 'since'],
    [{ until: '--root=/' }, 'until'],
    [{ format: 'bogus' as never }, 'format'],
    [{ all: 'yes' as never }, 'all'],
    [{ follow: 1 as never }, 'follow'],
  ])('rejects %j naming the field', async (bad, field) => {
    await expectBadRequest(() => adapter.stream(bad, new AbortController().signal), field);
    await expectBadRequest(() => adapter.check(bad), field);
  });

  it('check() turns a time journalctl cannot parse into a bad request', async () => {
    await expectBadRequest(() => adapter.check({ since: 'garbage' }), 'since');
    await expectBadRequest(() => adapter.check({ since: 'today', until: 'not a time' }), 'until');
    // Trailing blanks end journalctl's stderr; the message still names the field.
    await expectBadRequest(() => adapter.check({ since: 'garbage  ' }), 'since');
    await expectBadRequest(() => adapter.check({ since: 'today', until: 'not a time ' }), 'until');
    await expectBadRequest(() => adapter.check({ since: '2024-03-02', until: '2024-03-01' }), 'since must be before until');
    await expect(adapter.check({ since: '2024-03-01 10:00:00 UTC', until: 'now' })).resolves.toBeUndefined();
  });

  it('an unparseable time without check() errors the stream with a bad request', async () => {
    await expectBadRequest(() => query({ since: 'garbage' }), 'since');
  });

  it('a missing journalctl is SUP_ERR_TOOL_MISSING', async () => {
    const missing = createJournalAdapter({ journalctlPath: join(directory, 'no-such-journalctl') });
    await expect(missing.stream({}, new AbortController().signal)).rejects.toThrow(
      expect.objectContaining({ code: 'SUP_ERR_TOOL_MISSING' }),
    );
  });

  it('the sim refuses field names that could corrupt the stream', async () => {
    await expectBadRequest(() => sim.write({ message: 'm', fields: { _PID: '1' } }), '_PID');
    await expectBadRequest(() => sim.write({ message: 'm', fields: { 'bad-name': 'x' } }), 'bad-name');
    await expectBadRequest(() => sim.write({ message: 'm', fields: { 'A\nB': 'x' } }), 'fields');
    await expectBadRequest(() => sim.write({ message: 'm', fields: { MESSAGE: 'x' } }), 'MESSAGE');
    await expectBadRequest(() => sim.write({ message: 'm', priority: 8 }), 'priority');
  });

  it('the sim fails to start, naming the path, when journal-remote cannot create its file', async () => {
    await expect(startJournalSim({ directory: join(directory, 'missing') })).rejects.toThrow(
      expect.objectContaining({ code: 'SUP_ERR_INTERNAL', message: expect.stringContaining(join(directory, 'missing')) }),
    );
  });
});

describe('following the simulated journal', () => {
  let directory: string;
  let sim: JournalSim;

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'fleetlab-journal-follow-'));
    sim = await startJournalSim({ directory });
  });

  afterAll(async () => {
    await sim?.close();
    if (directory) await rm(directory, { recursive: true, force: true });
  });

  it('yields an entry written after the stream started; abort kills journalctl and ends the stream', async () => {
    const adapter = createJournalAdapter({ directory });
    await sim.write({ unit: 'follow.service', message: 'before' });
    await sim.flush();
    const controller = new AbortController();
    const stream = await adapter.stream({ follow: true, unit: 'follow.service', format: 'cat' }, controller.signal);
    expect(stream.pid).toBeTypeOf('number');
    let seen = '';
    let wroteAfter = false;
    for await (const chunk of stream) {
      seen += String(chunk);
      if (!wroteAfter && seen.includes('before\n')) {
        wroteAfter = true;
        await sim.write({ unit: 'follow.service', message: 'after' });
      }
      if (seen.includes('after\n')) controller.abort();
    }
    expect(lines(seen)).toEqual(['before', 'after']);
    expect(() => process.kill(stream.pid!, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }));
  });

  it('newBoot() gives later entries a new _BOOT_ID', async () => {
    const adapter = createJournalAdapter({ directory });
    const oldBoot = sim.bootId;
    const newBoot = sim.newBoot();
    expect(newBoot).toMatch(/^[0-9a-f]{32}$/);
    expect(newBoot).not.toBe(oldBoot);
    expect(sim.bootId).toBe(newBoot);
    await sim.write({ unit: 'boot.service', message: 'after reboot' });
    await sim.flush();
    const text = await readAll(adapter.stream({ count: 3, format: 'json' }, new AbortController().signal));
    const entries = lines(text).map((l) => JSON.parse(l));
    expect(entries.map((e) => e._BOOT_ID)).toEqual([oldBoot, newBoot, newBoot]);
    // Like a real boot, the new one starts with the kernel's banner.
    expect(entries[1]).toMatchObject({ _TRANSPORT: 'kernel', SYSLOG_IDENTIFIER: 'kernel' });
    expect(entries[1].MESSAGE).toMatch(/^Linux version /);
    expect(entries[2].MESSAGE).toBe('after reboot');
  });

  it('"*" on a journal with no unit yet (a fresh boot) shows nothing', async () => {
    const fresh = await mkdtemp(join(tmpdir(), 'fleetlab-journal-fresh-'));
    const freshSim = await startJournalSim({ directory: fresh });
    try {
      await freshSim.flush();
      const adapter = createJournalAdapter({ directory: fresh });
      expect(await readAll(adapter.stream({ unit: '*', format: 'cat' }, new AbortController().signal))).toBe('');
      // The journal is not empty: the kernel's entry is there, it belongs to no unit.
      expect(lines(await readAll(adapter.stream({ format: 'cat' }, new AbortController().signal)))).toEqual([expect.stringMatching(/^Linux version /)]);
    } finally {
      await freshSim.close();
      await rm(fresh, { recursive: true, force: true });
    }
  });

  it('a boot with nothing logged yet but the kernel can be followed (journalctl --follow reads only the current boot)', async () => {
    sim.newBoot();
    await sim.flush();
    const controller = new AbortController();
    const stream = await createJournalAdapter({ directory }).stream({ follow: true, count: 1, format: 'cat' }, controller.signal);
    let seen = '';
    for await (const chunk of stream) {
      seen += String(chunk);
      if (seen.includes('\n')) controller.abort();
    }
    expect(lines(seen)).toEqual([expect.stringMatching(/^Linux version /)]);
  });
});
