/**
 * A lab board's health check without a board (hil/lab/health-*.ts, lab-watch.ts's plan): the
 * lab file's `health` section, what the board's answers mean (df, the clock, the firmware's
 * throttling word), the steps run over fake probes (one that hangs is cut at its bound), and
 * what a round of `lab watch` does with each board. Fast: no SSH, no database.
 */
import { describe, expect, it } from 'vitest';
import { parseLabFile } from '../hil/lab/lab-file.js';
import { checkDue, clockVerdict, parseDfFreeMb, runHealthCheck, throttlingVerdict, type HealthProbes } from '../hil/lab/health-check.js';
import { allOutMessage } from '../hil/lab/lease-board.js';
import { planRound } from '../hil/lab/lab-watch.js';
import type { Lease, OfflineBoard } from '../hil/lab/lease-store.js';

const board = (name: string, extra = '') => `  - name: ${name}\n    tags: [rpi4]\n    host: 127.0.0.1\n    privateKey: /k\n${extra}`;
const parse = (text: string) => parseLabFile(text, '/lab/fleetlab.lab.yaml', {});

describe('the health section of a lab file', () => {
  it('is off without the section, every default with health: {}, and a board may tighten its own steps', () => {
    expect(parse(`boards:\n${board('a')}`).health).toBeUndefined();
    expect(parse(`boards:\n${board('a')}`).boards[0]!.health).toBeUndefined();
    const lab = parse(`health: {}\nboards:\n${board('a')}${board('b', '    health: { skip: [engine], minFreeMb: 100, stepTimeoutSeconds: 5 }\n')}`);
    expect(lab.health).toEqual({ maxAgeMs: 900_000, everyMs: 300_000, infraFailures: 3, infraWindowMs: 3_600_000, defaults: { skip: [], stepTimeoutMs: 20_000, maxClockSkewMs: 10_000, minFreeMb: 500 } });
    expect(lab.boards[0]!.health).toEqual(lab.health!.defaults);
    expect(lab.boards[1]!.health).toEqual({ skip: ['engine'], stepTimeoutMs: 5000, maxClockSkewMs: 10_000, minFreeMb: 100 });
    // `health:` alone is YAML's null: the defaults too.
    expect(parse(`health:\nboards:\n${board('a')}`).health?.maxAgeMs).toBe(900_000);
    expect(parse(`health: { maxAgeSeconds: 0, everySeconds: 5, infraFailures: { count: 1, windowSeconds: 60 } }\nboards:\n${board('a')}`).health).toMatchObject({ maxAgeMs: 0, everyMs: 5000, infraFailures: 1, infraWindowMs: 60_000 });
  });

  it.each([
    [`health: { everySecond: 5 }\nboards:\n${board('a')}`, /unknown field "health.everySecond" \(known: maxAgeSeconds, everySeconds, infraFailures, skip,/],
    [`health: { skip: [ping] }\nboards:\n${board('a')}`, /"health.skip" must be a list of steps from ssh, supervisor, clock, disk, rootfs, engine, throttling/],
    [`health: { stepTimeoutSeconds: 0 }\nboards:\n${board('a')}`, /"health.stepTimeoutSeconds" must be a whole number from 1 to 600, got 0/],
    [`health: { infraFailures: 3 }\nboards:\n${board('a')}`, /"health.infraFailures" must be a mapping \{ count, windowSeconds \}/],
    [`health: []\nboards:\n${board('a')}`, /"health" must be a mapping/],
    [`health: {}\nboards:\n${board('a', '    health: { everySeconds: 5 }\n')}`, /unknown field "boards\[0\] \(a\).health.everySeconds" \(known on a board: skip, stepTimeoutSeconds, maxClockSkewSeconds, minFreeMb; the rest are lab-wide\)/],
    [`boards:\n${board('a', '    health: { minFreeMb: 5 }\n')}`, /boards\[0\] \(a\).health: checks are on only with a lab-wide "health" section/],
    [`health: {}\nboardz: []`, /unknown field "boardz" \(known: leases, health, flakes, boards\)/],
    [`boards:\n${board('a')}${board('b')}${board('a')}`, /boards\[2\] \(a\): another board is already called a \(boards\[0\]\); each board is named once/],
  ])('refuses %j, naming the field', (text, message) => {
    expect(() => parse(text)).toThrow(message);
    expect(() => parse(text)).toThrow(expect.objectContaining({ code: 'HIL_ERR_LAB' }));
  });
});

describe("what a board's answers mean", () => {
  it('reads free space from df -Pk', () => {
    expect(parseDfFreeMb('Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/vda2 3950000 3000000 768000 80% /\n')).toBe(750);
    expect(parseDfFreeMb('df: /: No such file\n')).toBeUndefined();
  });

  it("judges the clock against this host's, allowing half the round trip", () => {
    expect(clockVerdict(10_000, 9_000, 11_000, 500)).toEqual({ ok: true, detail: '0.0 s ahead of this host' });
    expect(clockVerdict(3_600_000, 0, 100, 10_000)).toEqual({ ok: false, detail: "the board's clock is 3599.9 s ahead of this host's (at most 10.0 s)" });
    expect(clockVerdict(0, 20_000, 20_000, 10_000).ok).toBe(false);
    // 10.5 s off, read over a 2 s round trip: within 10 s plus the 1 s the answer may have been on the wire.
    expect(clockVerdict(20_500, 9_000, 11_000, 10_000).ok).toBe(true);
  });

  it("reads the Pi firmware's throttling word: under-voltage (now or since boot) and throttling fail, the rest is said", () => {
    expect(throttlingVerdict('throttled=0x0\n')).toEqual({ status: 'pass', detail: '0x0: no under-voltage or throttling' });
    expect(throttlingVerdict('throttled=0x50005')).toEqual({ status: 'fail', detail: '0x50005: under-voltage now, throttled now, under-voltage has occurred since boot, throttling has occurred' });
    expect(throttlingVerdict('throttled=0x10000').status).toBe('fail');
    expect(throttlingVerdict('throttled=0x80008')).toEqual({ status: 'pass', detail: '0x80008: soft temperature limit now, soft temperature limit has occurred (not failing)' });
    expect(throttlingVerdict('absent\n')).toMatchObject({ status: 'skip', detail: expect.stringMatching(/no vcgencmd and no \/sys\/devices\/platform\/soc\/soc:firmware\/get_throttled/) });
    expect(throttlingVerdict('garbage').status).toBe('fail');
  });

  it('is due when never checked or older than the bound', () => {
    expect(checkDue(undefined, 1000, 60_000)).toBe(true);
    expect(checkDue(1000, 61_000, 60_000)).toBe(false);
    expect(checkDue(1000, 61_001, 60_000)).toBe(true);
  });
});

/** Probes for a board answering as a healthy emulated board does, with `over` replacing some answers. */
function fakeBoard(over: { run?: (argv: readonly string[]) => Promise<{ exitCode: number; stdout: string; stderr: string }> | undefined; ping?: () => Promise<{ status: number; body: string }> } = {}): HealthProbes & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    now: () => Date.now(),
    ping: () => (calls.push('ping'), over.ping?.() ?? Promise.resolve({ status: 200, body: 'OK' })),
    run: (argv) => {
      calls.push(argv[0]!);
      const given = over.run?.(argv);
      if (given) return given;
      const out = (stdout: string) => Promise.resolve({ exitCode: 0, stdout, stderr: '' });
      if (argv[0] === 'date') return out(String(Date.now()));
      if (argv[0] === 'df') return out('Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/vda2 3950000 1000000 2000000 30% /\n');
      if (argv[0] === 'docker') return out('26.1.5+dfsg1\n');
      if (argv[0] === 'sh' && argv[2]!.includes('get_throttled')) return out('absent\n');
      return out('');
    },
  };
}

const health = { skip: [] as const, stepTimeoutMs: 1000, maxClockSkewMs: 10_000, minFreeMb: 500 };

describe('a health check over probes', () => {
  it('passes a healthy emulated board, the throttling step skipped with the reason', async () => {
    const r = await runHealthCheck(fakeBoard(), health);
    expect(r.ok).toBe(true);
    expect(r.steps.map((s) => [s.step, s.status])).toEqual([
      ['ssh', 'pass'],
      ['supervisor', 'pass'],
      ['clock', 'pass'],
      ['disk', 'pass'],
      ['rootfs', 'pass'],
      ['engine', 'pass'],
      ['throttling', 'skip'],
    ]);
    expect(r.steps.find((s) => s.step === 'disk')!.detail).toBe('1953 MiB free on /');
  });

  it('fails at the first failing step and still runs the rest', async () => {
    const r = await runHealthCheck(fakeBoard({ ping: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:48484')), run: (argv) => (argv[0] === 'df' ? Promise.resolve({ exitCode: 0, stdout: 'F 1 U A C M\n/dev/vda2 100 90 10240 90% /\n', stderr: '' }) : undefined) }), health);
    expect(r).toMatchObject({ ok: false, failedStep: 'supervisor', reason: 'supervisor: connect ECONNREFUSED 127.0.0.1:48484' });
    expect(r.steps.find((s) => s.step === 'disk')).toMatchObject({ status: 'fail', detail: '10 MiB free on / (at least 500 MiB)' });
  });

  it('cuts a step that hangs at its bound, and skips what needs SSH when SSH does not answer', async () => {
    const started = Date.now();
    const hung = await runHealthCheck(fakeBoard({ run: (argv) => (argv[0] === 'docker' ? new Promise(() => undefined) : undefined) }), health);
    expect(hung).toMatchObject({ ok: false, failedStep: 'engine', reason: 'engine: engine did not answer within 2 s' });
    expect(Date.now() - started).toBeLessThan(5000);
    const noSsh = await runHealthCheck(fakeBoard({ run: () => Promise.reject(new Error('SSH to root@127.0.0.1:1: connect ECONNREFUSED')) }), health);
    expect(noSsh.failedStep).toBe('ssh');
    expect(noSsh.steps.filter((s) => s.status === 'skip').map((s) => s.step)).toEqual(['clock', 'disk', 'rootfs', 'engine', 'throttling']);
    expect(noSsh.steps.find((s) => s.step === 'supervisor')!.status).toBe('pass');
  });

  it('skips the steps the lab file says, without running them', async () => {
    const probes = fakeBoard();
    const r = await runHealthCheck(probes, { ...health, skip: ['engine', 'clock'] });
    expect(r.ok).toBe(true);
    expect(probes.calls).not.toContain('docker');
    expect(probes.calls).not.toContain('date');
    expect(r.steps.find((s) => s.step === 'engine')).toMatchObject({ status: 'skip', detail: 'skipped by the lab file' });
  });
});

describe('a round of lab watch, planned', () => {
  const lab = parse(`health: {}\nboards:\n${board('free')}${board('held')}${board('out')}${board('sick')}`);
  const lease = (b: string, holder: string): Lease => ({ board: b, lease: 'l', holder, acquiredAt: 0, expiresAt: 1 });
  const out = (b: string, kind: OfflineBoard['kind']): OfflineBoard => ({ board: b, kind, since: 0, reason: 'r', markedBy: 'm' });

  it('leases a free board to check it, checks boards nobody is given, leaves held ones alone', () => {
    const plan = planRound(lab, new Map([['held', lease('held', 'ci@r1 pid 4')]]), new Map([['out', out('out', 'offline')], ['sick', out('sick', 'quarantined')]]));
    expect(plan.map((p) => [p.board.name, p.action, 'why' in p ? p.why : ''])).toEqual([
      ['free', 'lease-and-check', ''],
      ['held', 'skip', 'leased by ci@r1 pid 4'],
      ['out', 'check', 'offline: nobody is given it'],
      ['sick', 'check', 'quarantined: nobody is given it'],
    ]);
    expect(planRound(lab, new Map(), new Map(), ['sick']).map((p) => p.board.name)).toEqual(['sick']);
  });

  it('tells a run whose boards are all out why, quarantine apart from offline', () => {
    expect(allOutMessage(['rpi4'], ['a', 'b'], new Map([['a', out('a', 'offline')]]))).toBeUndefined();
    expect(allOutMessage(['rpi4'], ['a'], new Map([['a', out('a', 'offline')]]))).toBe('every board with tags [rpi4] is offline: a (r). Once a board is fixed: fleetlab lab online <board>');
    expect(allOutMessage(['rpi4'], ['a', 'b'], new Map([['a', out('a', 'offline')], ['b', out('b', 'quarantined')]]))).toMatch(/^every board with tags \[rpi4\] is out of the lab: a \(offline: r\); b \(quarantined: r\)\. A quarantined board comes back when it passes a check/);
  });
});
