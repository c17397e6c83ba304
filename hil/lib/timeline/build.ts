/**
 * What a test recorded, turned into lanes: pure, so the page of a failed spec and a unit test
 * build the same timeline from the same records. Times in records are epoch ms; lanes count
 * from the test's start.
 */
import type { StepEvent, StepStart } from '../steps.js';
import { clip, keepNewest, LANES, LIMITS, type EventLane, type Lane, type LaneId, type LevelLane, type Mark, type SeriesLane, type Span, type Timeline, type Tone } from './model.js';

/** One container event as the engine's /events stream gave it, reduced. */
export interface ContainerEvent {
  readonly at: number;
  /** `create`, `start`, `die`, `restart`, `destroy`, `kill`, `stop`, `oom`, `health_status: healthy`... */
  readonly action: string;
  /** The container's name (or its service's), the lane's row. */
  readonly name: string;
  readonly exitCode?: number;
}

/** The supervisor's state at a moment it changed (only changes are kept). */
export interface StateSample {
  readonly at: number;
  readonly status?: string;
  readonly appState?: string;
  /** Overall download progress, percent, while downloading. */
  readonly download?: number | null;
  /** Update locks held (`<appId>/<service>`); undefined where the target cannot read them. */
  readonly locks?: readonly string[];
  /** The request failed (device off, rebooting): why. */
  readonly unreachable?: string;
}

export interface UsageSample {
  readonly at: number;
  /** CPU used since the sample before, percent of one core. */
  readonly cpuPercent?: number;
  readonly rssBytes: number;
}

export interface TextLine {
  readonly at: number;
  readonly text: string;
}

export interface Recorded {
  readonly title: string;
  readonly subject: string;
  readonly origin: number;
  readonly end: number;
  readonly failure?: { readonly at: number; readonly error: string };
  /** The harness's steps; without them (a bundle) there are no power, network or step lanes. */
  readonly steps?: readonly StepEvent[];
  readonly stepsDropped?: number;
  /** The LED line's changes (epoch ms) and its level when the test started. */
  readonly led?: { readonly line: string; readonly initial: number; readonly transitions: ReadonlyArray<{ readonly at: number; readonly value: number }> };
  readonly containers?: { readonly events: readonly ContainerEvent[]; readonly dropped: number };
  readonly states?: { readonly samples: readonly StateSample[]; readonly dropped: number };
  readonly journal?: readonly TextLine[];
  readonly serial?: readonly TextLine[];
  readonly usage?: { readonly samples: readonly UsageSample[]; readonly dropped: number };
  readonly notes?: readonly string[];
  /** Lanes the target cannot record, each with why: drawn as such rather than left out. */
  readonly absent?: Partial<Record<LaneId, string>>;
}

export function buildTimeline(r: Recorded): Timeline {
  const rel = (at: number) => at - r.origin;
  const lanes: Lane[] = [];
  if (r.led) lanes.push(ledLane(r.led, rel));
  const steps = r.steps ? pairSteps(r.steps) : undefined;
  if (steps) lanes.push(powerLane(steps, rel), networkLane(steps, rel));
  if (r.containers) lanes.push(containerLane(r.containers.events, r.containers.dropped, rel));
  if (r.states) lanes.push(...stateLane(r.states.samples, r.states.dropped, rel));
  if (steps) lanes.push(stepLane(steps, r.stepsDropped ?? 0, rel));
  if (r.journal) lanes.push(lineLane('journal', r.journal, rel));
  if (r.serial) lanes.push(lineLane('serial', r.serial, rel));
  if (r.usage) lanes.push(...usageLanes(r.usage.samples, r.usage.dropped, rel));
  for (const [id, why] of Object.entries(r.absent ?? {}) as Array<[LaneId, string]>) {
    if (!lanes.some((l) => l.id === id)) lanes.push({ kind: 'absent', id, name: LANES[id], why, dropped: 0 });
  }
  const order = Object.keys(LANES);
  lanes.sort((a, b) => order.indexOf(a.id) - order.indexOf(b.id));
  return {
    version: 1,
    title: r.title,
    subject: r.subject,
    origin: r.origin,
    end: Math.max(r.end - r.origin, 1),
    ...(r.failure ? { failure: { at: rel(r.failure.at), error: clip(r.failure.error, 2_000) } } : {}),
    lanes,
    notes: [...(r.notes ?? [])],
  };
}

interface PairedStep {
  readonly start: StepStart;
  readonly end?: number;
  readonly error?: string;
}

function pairSteps(events: readonly StepEvent[]): PairedStep[] {
  const open = new Map<number, StepStart>();
  const out: PairedStep[] = [];
  for (const e of events) {
    if (e.kind === 'start') open.set(e.id, e);
    else {
      const start = open.get(e.id);
      open.delete(e.id);
      if (start) out.push({ start, end: e.at, ...(e.error !== undefined ? { error: e.error } : {}) });
    }
  }
  for (const start of open.values()) out.push({ start });
  return out.sort((a, b) => a.start.at - b.start.at);
}

function ledLane(led: NonNullable<Recorded['led']>, rel: (at: number) => number): LevelLane {
  const { items, dropped } = keepNewest(led.transitions, LIMITS.levelPoints);
  const points: Array<readonly [number, number]> = dropped === 0 ? [[0, led.initial]] : [];
  for (const t of items) points.push([Math.max(0, rel(t.at)), t.value]);
  return { kind: 'level', id: 'led', name: LANES.led, points, dropped };
}

const spanOf = (s: PairedStep, rel: (at: number) => number, label: string, tone?: Tone): Span => ({
  from: rel(s.start.at),
  ...(s.end !== undefined ? { to: rel(s.end) } : {}),
  label,
  detail: `${s.start.protocol}.${s.start.action}${s.end !== undefined ? ` ${s.end - s.start.at} ms` : ' (not finished)'}${s.error ? `: ${s.error}` : ''}`,
  ...(s.error ? { tone: 'bad' as const } : tone ? { tone } : {}),
});

/**
 * Power from the harness's own calls: a cut lasts from `off` until `on` finished, a cycle and
 * a reboot for as long as the call took, a supervisor kill until it answered again.
 */
function powerLane(steps: readonly PairedStep[], rel: (at: number) => number): EventLane {
  const spans: Span[] = [];
  let cut: PairedStep | undefined;
  for (const s of steps) {
    const { protocol, action } = s.start;
    if (protocol === 'supervisor' && action === 'kill') spans.push(spanOf(s, rel, 'supervisor killed', 'warn'));
    if (protocol !== 'power') continue;
    if (action === 'off') cut = s;
    else if (action === 'on') {
      const from = cut ? cut.start.at : s.start.at;
      spans.push({ from: rel(from), ...(s.end !== undefined ? { to: rel(s.end) } : {}), label: 'cut', detail: `power off${cut ? ` at +${rel(cut.start.at)} ms` : ''}, on until +${s.end !== undefined ? rel(s.end) : '?'} ms`, tone: 'bad' });
      cut = undefined;
    } else spans.push(spanOf(s, rel, action === 'cycle' ? 'cycled' : action, 'warn'));
  }
  if (cut) spans.push({ from: rel(cut.start.at), label: 'cut', detail: 'power off, never restored during the test', tone: 'bad' });
  return { kind: 'events', id: 'power', name: LANES.power, spans, marks: [], dropped: 0 };
}

function networkLane(steps: readonly PairedStep[], rel: (at: number) => number): EventLane {
  const spans: Span[] = [];
  let cut: PairedStep | undefined;
  for (const s of steps) {
    if (s.start.protocol !== 'network') continue;
    if (s.start.action === 'partition') cut ??= s;
    else if (s.start.action === 'heal' && cut) {
      spans.push({ from: rel(cut.start.at), to: rel(s.end ?? s.start.at), label: 'partitioned', detail: 'cut from its cloud until healed', tone: 'warn' });
      cut = undefined;
    }
  }
  if (cut) spans.push({ from: rel(cut.start.at), label: 'partitioned', detail: 'never healed during the test', tone: 'warn' });
  return { kind: 'events', id: 'network', name: LANES.network, spans, marks: [], dropped: 0 };
}

/** The harness's steps, a row per protocol (`harness` for deploy, wait and faults). */
function stepLane(steps: readonly PairedStep[], dropped: number, rel: (at: number) => number): EventLane {
  const spans = steps.map((s) => ({ ...spanOf(s, rel, s.start.action, s.start.protocol === 'harness' ? 'info' : undefined), row: s.start.protocol }));
  return { kind: 'events', id: 'steps', name: LANES.steps, spans, marks: [], dropped };
}

const EXIT_OK = new Set([0]);

/** A row per container: running from `start` to `die`, each event a mark. */
function containerLane(events: readonly ContainerEvent[], dropped: number, rel: (at: number) => number): EventLane {
  const spans: Span[] = [];
  const marks: Mark[] = [];
  const running = new Map<string, number>();
  const created = new Map<string, number>();
  for (const e of events) {
    const at = rel(e.at);
    if (e.action === 'create') created.set(e.name, at);
    const exit = e.exitCode !== undefined ? ` (exit ${e.exitCode})` : '';
    const tone: Tone | undefined = e.action === 'die' ? (e.exitCode !== undefined && EXIT_OK.has(e.exitCode) ? 'info' : 'bad') : e.action === 'oom' || e.action.includes('unhealthy') ? 'bad' : e.action.startsWith('start') ? 'ok' : undefined;
    marks.push({ at, text: `${e.name}: ${e.action}${exit}`, row: e.name, ...(tone ? { tone } : {}) });
    if (e.action.startsWith('start') || e.action === 'restart') {
      if (!running.has(e.name)) running.set(e.name, at);
    } else if (e.action === 'die') {
      // A start before the recording began: running since its creation if that was seen, else since the start of the axis.
      const from = running.get(e.name) ?? created.get(e.name) ?? 0;
      running.delete(e.name);
      spans.push({ from, to: at, label: `running${exit}`, row: e.name, tone: 'ok' });
    }
  }
  for (const [name, from] of running) spans.push({ from, label: 'running', row: name, tone: 'ok' });
  return { kind: 'events', id: 'containers', name: LANES.containers, spans, marks, dropped };
}

/** The supervisor's status, appState, download and locks, each a row of spans from change to change. */
function stateLane(samples: readonly StateSample[], dropped: number, rel: (at: number) => number): EventLane[] {
  const rows: Record<string, Span[]> = { status: [], appState: [], download: [], lock: [] };
  const open: Record<string, { from: number; label: string; tone?: Tone } | undefined> = {};
  const set = (row: string, at: number, label: string | undefined, tone?: Tone) => {
    const cur = open[row];
    if (cur && cur.label === label) return;
    if (cur) rows[row]!.push({ from: cur.from, to: at, label: cur.label, row, ...(cur.tone ? { tone: cur.tone } : {}) });
    open[row] = label === undefined ? undefined : { from: at, label, ...(tone ? { tone } : {}) };
  };
  for (const s of samples) {
    const at = rel(s.at);
    if (s.unreachable !== undefined) {
      set('status', at, 'unreachable', 'bad');
      continue;
    }
    set('status', at, s.status ?? '?', s.status === 'Idle' || s.status === 'success' ? undefined : 'info');
    set('appState', at, s.appState ?? '?', s.appState === 'applied' ? 'ok' : 'info');
    set('download', at, s.download === null || s.download === undefined ? undefined : `${s.download}%`, 'info');
    if (s.locks !== undefined) set('lock', at, s.locks.length ? `held: ${s.locks.join(', ')}` : undefined, 'warn');
  }
  const spans: Span[] = [];
  for (const row of Object.keys(rows)) {
    const cur = open[row];
    if (cur) rows[row]!.push({ from: cur.from, label: cur.label, row, ...(cur.tone ? { tone: cur.tone } : {}) });
    spans.push(...rows[row]!);
  }
  return [{ kind: 'events', id: 'supervisor', name: LANES.supervisor, spans, marks: [], dropped }];
}

function lineLane(id: 'journal' | 'serial', lines: readonly TextLine[], rel: (at: number) => number): EventLane {
  const { items, dropped } = keepNewest(lines, LIMITS.lines);
  const marks = items.map((l) => ({ at: rel(l.at), text: clip(l.text), ...(/\b(error|fail(ed|ure)?|refused|cannot|panic)\b/i.test(l.text) ? { tone: 'bad' as const } : {}) }));
  return { kind: 'events', id, name: LANES[id], spans: [], marks, dropped };
}

function usageLanes(samples: readonly UsageSample[], dropped: number, rel: (at: number) => number): SeriesLane[] {
  const cpu = samples.filter((s) => s.cpuPercent !== undefined).map((s) => [rel(s.at), Math.round(s.cpuPercent! * 10) / 10] as const);
  const rss = samples.map((s) => [rel(s.at), Math.round((s.rssBytes / 1048576) * 10) / 10] as const);
  return [
    { kind: 'series', id: 'cpu', name: LANES.cpu, unit: '%', points: cpu, dropped },
    { kind: 'series', id: 'rss', name: LANES.rss, unit: 'MB', points: rss, dropped },
  ];
}
