/**
 * A simulated container's healthcheck, as dockerd 20.10 runs one (daemon/health.go): a probe
 * every `Interval` (30 s by default) from the start, each allowed `Timeout` (30 s); a pass makes
 * the container healthy, `Retries` (3) failures in a row unhealthy, and failures within
 * `StartPeriod` of the start do not count while it is still starting. The last 5 results are
 * kept; each probe is an exec (exec_create, exec_start, exec_die events) and a change of status
 * a `health_status: <status>` event.
 *
 * Nothing runs, so a probe plays its command as the process model plays a container's
 * (`exit N`, `true`, `false`, `sleep N`, `echo ...`, `sh -c` scripts of those); a command
 * the model cannot play passes, as the simulated app it checks is taken to be well.
 */
import { randomId, type HealthConfig, type HealthRecord } from './model.js';
import { behaviourOf } from './process-model.js';

export const HEALTH_DEFAULTS = { intervalNs: 30e9, timeoutNs: 30e9, retries: 3, startPeriodNs: 0 };
const KEEP_RESULTS = 5;

/** A duration as Go prints one (`200ms`, `30s`, `1m30s`, `1h0m0s`), as dockerd's probe timeout message shows it. */
export function goDuration(ns: number): string {
  const trim = (n: number) => String(Number(n.toFixed(9)));
  if (ns < 1e3) return `${ns}ns`;
  if (ns < 1e6) return `${trim(ns / 1e3)}µs`;
  if (ns < 1e9) return `${trim(ns / 1e6)}ms`;
  const h = Math.floor(ns / 3600e9);
  const m = Math.floor((ns % 3600e9) / 60e9);
  const sec = `${trim((ns % 60e9) / 1e9)}s`;
  return h ? `${h}h${m}m${sec}` : m ? `${m}m${sec}` : sec;
}

/** The probe's argv, or undefined when the check is off (`["NONE"]`) or has no test. */
export function probeCommand(config: HealthConfig | undefined): string[] | undefined {
  const [kind, ...rest] = config?.Test ?? [];
  if (kind === 'CMD' && rest.length) return rest;
  if (kind === 'CMD-SHELL' && rest.length) return ['/bin/sh', '-c', rest.join(' ')];
  return undefined;
}

/** The container's healthcheck over the image's, field by field, as dockerd merges them at create. */
export function mergeHealthcheck(image: HealthConfig | null | undefined, own: HealthConfig | null | undefined): HealthConfig | undefined {
  if (!own) return image ?? undefined;
  if (!image) return own;
  return {
    Test: own.Test?.length ? own.Test : image.Test,
    ...((own.Interval || image.Interval) ? { Interval: own.Interval || image.Interval } : {}),
    ...((own.Timeout || image.Timeout) ? { Timeout: own.Timeout || image.Timeout } : {}),
    ...((own.StartPeriod || image.StartPeriod) ? { StartPeriod: own.StartPeriod || image.StartPeriod } : {}),
    ...((own.Retries || image.Retries) ? { Retries: own.Retries || image.Retries } : {}),
  };
}

/** dockerd's refusals of a create body's Healthcheck (400), or undefined when it is sound. */
export function healthcheckProblem(config: HealthConfig | null | undefined): string | undefined {
  if (!config) return undefined;
  const MIN = 1e6; // 1 ms, containertypes.MinimumDuration
  if (config.Interval && config.Interval < MIN) return 'Interval in Healthcheck cannot be less than 1ms';
  if (config.Timeout && config.Timeout < MIN) return 'Timeout in Healthcheck cannot be less than 1ms';
  if ((config.Retries ?? 0) < 0) return 'Retries in Healthcheck cannot be negative';
  if (config.StartPeriod && config.StartPeriod < MIN) return 'StartPeriod in Healthcheck cannot be less than 1ms';
  return undefined;
}

export interface HealthMonitorDeps {
  config: HealthConfig;
  command: string[];
  record: HealthRecord;
  /** When the container's current run started (ms, the engine's clock). */
  startedAt: number;
  clock: () => number;
  /** dockerd's exec_create/exec_start/exec_die and health_status events, with their attributes. */
  event: (action: string, extra: Record<string, string>) => void;
  changed: () => void;
}

/** Runs a started container's probes until stopped. */
export class HealthMonitor {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly deps: HealthMonitorDeps) {
    deps.record.Status = 'starting';
    deps.record.FailingStreak = 0;
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => this.probe(), (this.deps.config.Interval || HEALTH_DEFAULTS.intervalNs) / 1e6);
  }

  private probe(): void {
    const { deps } = this;
    const execId = randomId();
    const shown = deps.command.join(' ');
    deps.event(`exec_create: ${shown}`, { execID: execId });
    deps.event(`exec_start: ${shown}`, { execID: execId });
    const start = deps.clock();
    const timeoutNs = deps.config.Timeout || HEALTH_DEFAULTS.timeoutNs;
    const timeoutMs = timeoutNs / 1e6;
    const played = behaviourOf(deps.command, {});
    const ranMs = played.exitAfterMs ?? (played.tick ? Infinity : 0);
    const timedOut = ranMs > timeoutMs;
    this.timer = setTimeout(() => {
      if (this.stopped) return;
      const exitCode = timedOut ? -1 : played.exitCode;
      const output = timedOut ? `Health check exceeded timeout (${goDuration(timeoutNs)})` : played.startLines.map((l) => `${l.text}\n`).join('');
      if (!timedOut) deps.event('exec_die', { execID: execId, exitCode: String(exitCode) });
      this.result(start, exitCode, output);
      this.schedule();
    }, Math.min(ranMs, timeoutMs));
  }

  private result(start: number, exitCode: number, output: string): void {
    const { record, config } = this.deps;
    const before = record.Status;
    record.Log = [...record.Log, { Start: new Date(start).toISOString(), End: new Date(this.deps.clock()).toISOString(), ExitCode: exitCode, Output: output }].slice(-KEEP_RESULTS);
    if (exitCode === 0) {
      record.FailingStreak = 0;
      record.Status = 'healthy';
    } else {
      const inStartPeriod = record.Status === 'starting' && start - this.deps.startedAt < (config.StartPeriod || HEALTH_DEFAULTS.startPeriodNs) / 1e6;
      if (!inStartPeriod) {
        record.FailingStreak += 1;
        if (record.FailingStreak >= (config.Retries && config.Retries > 0 ? config.Retries : HEALTH_DEFAULTS.retries)) record.Status = 'unhealthy';
      }
    }
    if (record.Status !== before) this.deps.event(`health_status: ${record.Status}`, {});
    this.deps.changed();
  }
}
