/**
 * A lab that looks after itself, on two emulated boards: qemu-b is made unhealthy on purpose
 * (its supervisor stopped over SSH). A run offered qemu-b (qemu-a is another holder's) checks it
 * before using it, finds the supervisor silent, quarantines it with the reason and waits for
 * qemu-a, whose holder then stops renewing; the lab page, in Debian's Chromium, shows both
 * boards, that lease with its holder and time left, then gone, and the quarantine. Later runs lease only qemu-a; a run
 * that only qemu-b would do is told at once. Once the supervisor runs again, `fleetlab lab check`
 * brings qemu-b back and the next run gets it. Then qemu-a's clock goes two hours off: a team's
 * spec that checks the clock fails there, passes on its retry on qemu-b, and is labelled
 * board-suspect, counted against qemu-a.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from '@playwright/test';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { boardConfigFor } from '../../hil/lab/board-config-for-qemu.js';
import { openLab } from '../../hil/lab/lab-command.js';
import { buildLabServer } from '../../hil/lab/lab-serve.js';
import { SshDevice } from '../../device-access/ssh-device.js';
import type { QemuBoard, ReadyInfo } from '../../qemu/boot.js';
import { buildImage } from '../../device-image/build.js';
import { until } from '../../src/wait.js';
import { labBoard, reportItems, repoRoot, writeTeam } from './board-under-test.js';

const CHROMIUM = process.env.FLEETLAB_CHROMIUM ?? '/usr/bin/chromium';
const cli = [process.execPath, join(repoRoot, 'bin', 'fleetlab.js')];
const fleetlab = (args: readonly string[]) => execa(cli[0]!, [...cli.slice(1), ...args], { reject: false, env: { FLEETLAB_BOARD_CONFIG: '' } });
/** A team's spec that holds where the board's clock is wrong: its API's Date header against this host's clock. */
const CLOCK_SPEC = `import { expect, test } from 'fleetlab/test';

test("the board's clock agrees with this host's", async ({ device }) => {
  const r = await device.api.request('GET', '/ping');
  const skew = Math.abs(Date.parse(r.headers.date) - Date.now());
  expect(skew, 'the board answered with Date: ' + r.headers.date).toBeLessThan(60_000);
});
`;
/** The other holder's last renewal of qemu-a: it lapses this long after, while the run waits for it. */
const OTHER_LAST_BEAT_MS = 8_000;

describe('a lab of two QEMU boards, one unhealthy', () => {
  const boards: QemuBoard[] = [];
  const ready: ReadyInfo[] = [];
  let dir: string;
  let labFile: string;
  let browser: Browser | undefined;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: the lab page is checked in Debian's Chromium (scripts/provision installs it), or set FLEETLAB_CHROMIUM`);
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-health-'));
    const { image } = await buildImage({ repoRoot });
    const progress = (line: string) => console.error(`lab-health: ${line}`);
    const booted = await Promise.all(['a', 'b'].map((n) => labBoard(image, join(dir, `qemu-${n}`), progress)));
    boards.push(...booted.map((b) => b.board));
    ready.push(...booted.map((b) => b.ready));
    labFile = join(dir, 'fleetlab.lab.yaml');
    writeFileSync(labFile, stringify({
      leases: { store: `sqlite:${join(dir, 'leases.db')}`, ttlSeconds: 10 },
      // TCG: a docker call takes seconds, more on a loaded machine. The rest: the defaults a Pi gets.
      health: { maxAgeSeconds: 3600, stepTimeoutSeconds: 60 },
      boards: booted.map((b, i) => ({ name: `qemu-${'ab'[i]}`, tags: i === 0 ? ['virt'] : ['virt', 'b-only'], ...boardConfigFor(b.ready, cli) })),
    }));
  }, 900_000);

  afterAll(async () => {
    await browser?.close();
    await Promise.all(boards.map((b) => b.stop()));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Runs a shell line on board `i` (0: qemu-a, 1: qemu-b) as root. */
  const on = async (i: number, line: string) => {
    const ssh = new SshDevice({ host: '127.0.0.1', port: ready[i]!.sshPort, username: 'root', privateKey: readFileSync(ready[i]!.sshKey) });
    try {
      const r = await ssh.run(['sh', '-c', line], { timeoutMs: 120_000 });
      expect(r.exitCode, r.stderr).toBe(0);
    } finally {
      await ssh.close();
    }
  };

  const onB = (line: string) => on(1, line);

  it('quarantines the unhealthy board with the reason, leases only the healthy one, and takes the other back once it passes a check', async () => {
    await onB('systemctl stop fleetlab-supervisor.service');
    const open = await openLab(labFile);
    const app = buildLabServer(open.store, open.lab);
    try {
      const url = await app.listen({ host: '127.0.0.1', port: 0 });
      browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
      const page = await browser.newPage();
      await page.goto(`${url}/`);
      const row = (board: string) => page.locator(`tr[data-board="${board}"]`);

      // Another holder has qemu-a (for as long as the run takes to start and check qemu-b): the run is offered qemu-b.
      const other = (await open.store.acquire(['qemu-a'], 'other-run pid 1', 900_000))!;
      await expect.poll(() => row('qemu-a').getAttribute('data-state'), { timeout: 10_000 }).toBe('leased');
      expect(await row('qemu-a').locator('.holder').textContent()).toBe('other-run pid 1');
      expect(await row('qemu-a').locator('.detail').textContent()).toMatch(/^\d+ s left \(until .*Z, renewed while it runs\)$/);
      const first = fleetlab(['lab', 'run', '--lab', labFile, '--tag', 'virt', '--wait', '900', '--', 'sh', '-c', 'echo "ran on $FLEETLAB_LAB_BOARD"']);
      let firstEnded: string | undefined;
      void first.then((r) => (firstEnded = `lab run ended (exit ${r.exitCode}) before qemu-b was quarantined:\n${r.stdout}\n${r.stderr}`));

      await until('qemu-b quarantined', async () => (await open.store.offline()).get('qemu-b'), (o) => o !== undefined, { timeoutMs: 600_000, intervalMs: 500, alive: () => firstEnded ?? true });
      // The other holder's last heartbeat: its lease lapses shortly after.
      await open.store.renew(other.lease, OTHER_LAST_BEAT_MS);
      await expect.poll(() => row('qemu-b').getAttribute('data-state'), { timeout: 10_000 }).toBe('quarantined');
      expect(await row('qemu-b').locator('.detail').textContent()).toMatch(/^health check failed at supervisor: .* \(since .*Z\)$/);
      expect(await row('qemu-b').locator('.check').textContent()).toMatch(/^failed at supervisor, \d+ s ago/);
      // The other holder's lease lapses, the page shows it gone, and the run gets qemu-a.
      await expect.poll(() => row('qemu-a').locator('.holder').textContent(), { timeout: OTHER_LAST_BEAT_MS + 15_000 }).not.toBe('other-run pid 1');
      await page.screenshot({ path: join(dir, 'lab-page.png') });

      const r1 = await first;
      expect(r1.exitCode, r1.stderr).toBe(0);
      expect(r1.stdout.trim()).toBe('ran on qemu-a');
      expect(r1.stderr).toMatch(/qemu-b: health check failed at supervisor: .*: quarantined; trying another board/);
      expect(r1.stderr).toMatch(/qemu-a: health check passed \(passed\)/);

      const r2 = await fleetlab(['lab', 'run', '--lab', labFile, '--tag', 'virt', '--', 'sh', '-c', 'echo "ran on $FLEETLAB_LAB_BOARD"']);
      expect(r2.stdout.trim(), r2.stderr).toBe('ran on qemu-a');
      // qemu-a's check is recent: not checked again.
      expect(r2.stderr).not.toMatch(/health check/);

      const started = Date.now();
      const bOnly = await fleetlab(['lab', 'run', '--lab', labFile, '--tag', 'b-only', '--wait', '600', '--', 'true']);
      expect(bOnly.exitCode).toBe(1);
      expect(bOnly.stderr).toMatch(/every board with tags \[b-only\] is out of the lab: qemu-b \(quarantined: health check failed at supervisor: .*\)\. A quarantined board comes back when it passes a check/);
      expect(Date.now() - started).toBeLessThan(60_000);

      const status = await fleetlab(['lab', 'status', '--lab', labFile]);
      expect(status.exitCode, `lab status:\n${status.stdout}\n${status.stderr}`).toBe(0);
      expect(status.stdout).toMatch(/qemu-a .*checked \d+ (s|min) ago: passed +free/);
      expect(status.stdout).toMatch(/qemu-b .*checked \d+ (s|min) ago: failed at supervisor +QUARANTINED since .*\(health check failed at supervisor: .*\); back when it passes a check \(fleetlab lab check qemu-b\)/);

      // Still failing: lab check says so and exits 1; the board stays out.
      const still = await fleetlab(['lab', 'check', 'qemu-b', '--lab', labFile]);
      expect(still.exitCode, still.stdout + still.stderr).toBe(1);
      expect(still.stdout).toMatch(/^qemu-b: failed, already out at supervisor: .* \[ssh pass, supervisor fail \(.*\), clock pass, disk pass, rootfs pass, engine pass, throttling skip \(no vcgencmd/m);

      await onB('systemctl start fleetlab-supervisor.service');
      await until('qemu-b /ping after its supervisor started', async () => (await fetch(`${ready[1]!.apiUrl}/ping`, { signal: AbortSignal.timeout(5000) })).status, (s) => s === 200, { timeoutMs: 300_000, intervalMs: 1000 });
      const back = await fleetlab(['lab', 'check', 'qemu-b', '--lab', labFile]);
      expect(back.exitCode, back.stdout + back.stderr).toBe(0);
      expect(back.stdout).toMatch(/^qemu-b: passed, back in the lab \[ssh pass, supervisor pass, clock pass, disk pass, rootfs pass, engine pass, throttling skip/m);
      await expect.poll(() => row('qemu-b').getAttribute('data-state'), { timeout: 10_000 }).toBe('free');

      const r3 = await fleetlab(['lab', 'run', '--lab', labFile, '--tag', 'b-only', '--', 'sh', '-c', 'echo "ran on $FLEETLAB_LAB_BOARD"']);
      expect(r3.stdout.trim(), r3.stderr).toBe('ran on qemu-b');
      const log = (await open.store.history('qemu-b')).map((e) => [e.event, e.detail?.replace(/: .*/, ': ...') ?? null]);
      expect(log).toEqual([
        ['acquired', null],
        ['quarantined', 'health check failed at supervisor: ...'],
        ['online', 'passed its health check'],
        ['acquired', null],
        ['released', null],
      ]);
    } finally {
      await app.close();
      await open.close();
    }
  });

  it("labels a test that fails on the board whose clock is wrong and passes, retried, on the other board-suspect, counted against that board", async () => {
    // qemu-a's clock drifts two hours after its last check (both boards' checks are recent: no check runs before these leases).
    await on(0, `date -s @${Math.round(Date.now() / 1000) + 7200} >/dev/null`);
    try {
      const team = join(dir, 'clock-team');
      writeTeam(team, { 'clock.spec.ts': CLOCK_SPEC });
      // One worker, one retry: the first attempt takes qemu-a (the lab file's first board), the retry's new worker is steered to qemu-b.
      const run = await execa(process.execPath, [join(repoRoot, 'bin', 'fleetlab.js'), 'test', '--target', 'board', '--lab', labFile, '--tag', 'virt', '--workers=1', '--retries=1', '--reporter=json'], { cwd: team, reject: false, env: { FLEETLAB_BOARD_CONFIG: '' } });
      expect(run.exitCode, run.stderr).toBe(0);
      const report = JSON.parse(run.stdout.slice(run.stdout.indexOf('{'))) as { stats: { flaky: number } };
      expect(report.stats.flaky, run.stderr).toBe(1);
      const suspect = reportItems(report, 'annotations').filter((a) => a.type === 'board-suspect');
      // The JSON report has the result's annotations and, again, the test's (its last result's).
      expect([...new Set(suspect.map((a) => a.description))], run.stderr).toEqual(['failed on qemu-a (attempt 1), passed on qemu-b (attempt 2): counted against qemu-a']);
      // The retry's worker said why it took qemu-b (with --reporter=json a worker's output is in the report).
      expect(JSON.stringify(report)).toMatch(/this run's failed tests ran on qemu-a: a board other than that is taken/);

      const status = await fleetlab(['lab', 'status', '--lab', labFile]);
      expect(status.stdout).toMatch(/qemu-a .*last 1 run: 0 passed, 0 device, 0 infrastructure, 1 board-suspect/);
      expect(status.stdout).toMatch(/qemu-b .*last 1 run: 1 passed, 0 device, 0 infrastructure, 0 board-suspect/);
    } finally {
      await on(0, `date -s @${Math.round(Date.now() / 1000)} >/dev/null`);
    }
  }, 900_000);
});
