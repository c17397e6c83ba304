/**
 * A lab board's health check: its steps, run one after another, each bounded in time, with
 * what each saw. What the board answered is judged by pure functions (df's columns, the
 * firmware's throttling bits, the clock against this host's); the probes that reach the board
 * (SSH, HTTP) are given in, so the check is the same on a Pi, an emulated board, or a test's
 * fake. A board fails its check at the first step that fails; later steps still run, where they
 * can, so the stored result says everything that was wrong, not just the first thing.
 */
import { errorText } from '../../src/errors.js';
import { HEALTH_STEPS, type BoardHealth, type HealthStep } from './health-config.js';

export type StepStatus = 'pass' | 'fail' | 'skip';

export interface StepResult {
  readonly step: HealthStep;
  readonly status: StepStatus;
  /** What was seen (a pass), what was wrong (a fail), or why it did not run (a skip). */
  readonly detail: string;
  readonly ms: number;
}

export interface HealthResult {
  readonly ok: boolean;
  /** The first step that failed. */
  readonly failedStep?: HealthStep;
  /** `<step>: <detail>` of that step: what quarantine shows. */
  readonly reason?: string;
  readonly steps: readonly StepResult[];
}

/** How a check reaches a board: the edges, given in. */
export interface HealthProbes {
  /** Runs argv on the board over SSH; rejects if SSH does not answer within `timeoutMs`. */
  run(argv: readonly string[], timeoutMs: number): Promise<{ exitCode: number; stdout: string; stderr: string }>;
  /** GET the supervisor's /ping; its status and body. */
  ping(timeoutMs: number): Promise<{ status: number; body: string }>;
  /** This host's clock, epoch ms. */
  now(): number;
}

/** The Raspberry Pi firmware's throttling word where Raspberry Pi OS exposes it (no vcgencmd needed). */
export const THROTTLED_SYSFS = '/sys/devices/platform/soc/soc:firmware/get_throttled';

/** Prints `throttled=0x...` from vcgencmd or the firmware's sysfs file, or `absent`. */
const THROTTLED_SCRIPT = `if command -v vcgencmd >/dev/null 2>&1; then vcgencmd get_throttled; elif [ -r ${THROTTLED_SYSFS} ]; then echo "throttled=0x$(cat ${THROTTLED_SYSFS})"; else echo absent; fi`;

/** The steps that need SSH: skipped, with the reason, when SSH does not answer. */
const OVER_SSH: ReadonlySet<HealthStep> = new Set(['clock', 'disk', 'rootfs', 'engine', 'throttling']);

/** Free space on `/` in MiB from `df -Pk /` (POSIX format: the 4th column is available 1K blocks). */
export function parseDfFreeMb(text: string): number | undefined {
  const line = text.trim().split('\n').slice(1).find((l) => l.trim());
  const available = Number(line?.trim().split(/\s+/)[3]);
  return Number.isFinite(available) ? Math.floor(available / 1024) : undefined;
}

/**
 * The board's clock against this host's: `deviceMs` was read between `sentAt` and `gotAt`, so
 * it is compared with the middle, and the round trip's half is allowed on top of the bound.
 */
export function clockVerdict(deviceMs: number, sentAt: number, gotAt: number, maxSkewMs: number): { ok: boolean; detail: string } {
  const skew = deviceMs - (sentAt + gotAt) / 2;
  const slack = (gotAt - sentAt) / 2;
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  return Math.abs(skew) <= maxSkewMs + slack
    ? { ok: true, detail: `${s(Math.abs(skew))} ${skew >= 0 ? 'ahead of' : 'behind'} this host` }
    : { ok: false, detail: `the board's clock is ${s(Math.abs(skew))} ${skew >= 0 ? 'ahead of' : 'behind'} this host's (at most ${s(maxSkewMs)})` };
}

const THROTTLE_BITS: ReadonlyArray<readonly [number, string, boolean]> = [
  // bit, meaning, fails the check
  [0, 'under-voltage now', true],
  [1, 'ARM frequency capped now', false],
  [2, 'throttled now', true],
  [3, 'soft temperature limit now', false],
  // Sticky until reboot: a supply that browned out under load is a board to take out.
  [16, 'under-voltage has occurred since boot', true],
  [17, 'ARM frequency capping has occurred', false],
  [18, 'throttling has occurred', false],
  [19, 'soft temperature limit has occurred', false],
];

/** `vcgencmd get_throttled`'s answer (`throttled=0x50005`) judged: skip where the firmware does not say. */
export function throttlingVerdict(text: string): { status: StepStatus; detail: string } {
  const m = /throttled=(0x[0-9a-fA-F]+)/.exec(text);
  if (!m) {
    return text.trim() === 'absent'
      ? { status: 'skip', detail: `no vcgencmd and no ${THROTTLED_SYSFS}: not a Raspberry Pi's firmware (an emulated board has none)` }
      : { status: 'fail', detail: `unreadable answer ${JSON.stringify(text.trim().slice(0, 200))}` };
  }
  const word = Number.parseInt(m[1]!, 16);
  const set = THROTTLE_BITS.filter(([bit]) => (word & (1 << bit)) !== 0);
  if (set.length === 0) return { status: 'pass', detail: `${m[1]}: no under-voltage or throttling` };
  const failing = set.filter(([, , fails]) => fails);
  const said = `${m[1]}: ${set.map(([, what]) => what).join(', ')}`;
  return failing.length ? { status: 'fail', detail: said } : { status: 'pass', detail: `${said} (not failing)` };
}

/** `promise`, or a rejection naming the bound once `ms` have passed. */
function bounded<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${Math.round(ms / 1000)} s`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

type Outcome = { status: StepStatus; detail: string };

const ran = (r: { exitCode: number; stdout: string; stderr: string }) => `exit ${r.exitCode}${r.stderr.trim() ? `: ${r.stderr.trim().split('\n').at(-1)!.slice(0, 200)}` : ''}`;

/** What one step does, given the probes and the board's settings. */
async function runStep(step: HealthStep, probes: HealthProbes, h: BoardHealth): Promise<Outcome> {
  const t = h.stepTimeoutMs;
  switch (step) {
    case 'ssh': {
      const r = await probes.run(['true'], t);
      return r.exitCode === 0 ? { status: 'pass', detail: 'answers' } : { status: 'fail', detail: `true: ${ran(r)}` };
    }
    case 'supervisor': {
      const r = await probes.ping(t);
      return r.status === 200 ? { status: 'pass', detail: '/ping answers' } : { status: 'fail', detail: `/ping answered ${r.status} ${r.body.slice(0, 100)}` };
    }
    case 'clock': {
      const sentAt = probes.now();
      const r = await probes.run(['date', '+%s%3N'], t);
      const gotAt = probes.now();
      const deviceMs = Number(r.stdout.trim());
      if (r.exitCode !== 0 || !Number.isFinite(deviceMs)) return { status: 'fail', detail: `date: ${ran(r)} ${r.stdout.trim().slice(0, 50)}` };
      const v = clockVerdict(deviceMs, sentAt, gotAt, h.maxClockSkewMs);
      return { status: v.ok ? 'pass' : 'fail', detail: v.detail };
    }
    case 'disk': {
      const r = await probes.run(['df', '-Pk', '/'], t);
      const free = r.exitCode === 0 ? parseDfFreeMb(r.stdout) : undefined;
      if (free === undefined) return { status: 'fail', detail: `df: ${ran(r)}` };
      return free >= h.minFreeMb ? { status: 'pass', detail: `${free} MiB free on /` } : { status: 'fail', detail: `${free} MiB free on / (at least ${h.minFreeMb} MiB)` };
    }
    case 'rootfs': {
      // A card going bad is remounted read-only by the kernel: a file made and removed in / says it is not.
      const r = await probes.run(['sh', '-c', 'f=$(mktemp /.fleetlab-health.XXXXXX) && rm -f "$f"'], t);
      return r.exitCode === 0 ? { status: 'pass', detail: 'writable' } : { status: 'fail', detail: `cannot write to /: ${ran(r)}` };
    }
    case 'engine': {
      const r = await probes.run(['docker', 'version', '--format', '{{.Server.Version}}'], t);
      return r.exitCode === 0 && r.stdout.trim() ? { status: 'pass', detail: `engine ${r.stdout.trim()}` } : { status: 'fail', detail: `docker version: ${ran(r)}` };
    }
    case 'throttling': {
      const r = await probes.run(['sh', '-c', THROTTLED_SCRIPT], t);
      return r.exitCode === 0 ? throttlingVerdict(r.stdout) : { status: 'fail', detail: `get_throttled: ${ran(r)}` };
    }
  }
}

/** Runs the board's check: every step in order, each within its bound. Never throws. */
export async function runHealthCheck(probes: HealthProbes, health: BoardHealth): Promise<HealthResult> {
  const steps: StepResult[] = [];
  let sshDown: string | undefined;
  for (const step of HEALTH_STEPS) {
    const start = probes.now();
    let outcome: Outcome;
    if (health.skip.includes(step)) outcome = { status: 'skip', detail: 'skipped by the lab file' };
    else if (sshDown && OVER_SSH.has(step)) outcome = { status: 'skip', detail: `not run: ${sshDown}` };
    else {
      try {
        // The probe's own timeout ends the command on the board; this bound ends the wait whatever the probe does.
        outcome = await bounded(runStep(step, probes, health), health.stepTimeoutMs + 1000, step);
      } catch (err) {
        outcome = { status: 'fail', detail: errorText(err).split('\n')[0]!.slice(0, 300) };
      }
      if (step === 'ssh' && outcome.status === 'fail') sshDown = 'SSH did not answer';
    }
    steps.push({ step, ...outcome, ms: Math.max(0, probes.now() - start) });
  }
  const failed = steps.find((s) => s.status === 'fail');
  return failed ? { ok: false, failedStep: failed.step, reason: `${failed.step}: ${failed.detail}`, steps } : { ok: true, steps };
}

/** Whether a board's last check (its time on the store's clock) is too old to lease it without another. */
export function checkDue(lastAt: number | undefined, now: number, maxAgeMs: number): boolean {
  return lastAt === undefined || now - lastAt > maxAgeMs;
}
