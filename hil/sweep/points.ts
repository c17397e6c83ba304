/**
 * Where a sweep's faults land: pure planning over the update window a first, fault-free
 * update measured. Points are spread over the whole window, one per equal slice with a seeded
 * offset inside it, so every phase gets its share and the same seed draws the same points.
 */
import { FleetlabError } from '../../src/errors.js';
import { seededRandom } from '../../src/seeded-random.js';

/**
 * What a point does to the device mid-update: cut its power (a hard power cycle: every
 * process dies at once, the disk stays); kill the supervisor alone with SIGKILL (the OS
 * starts it again; the app's containers run on); restart the container engine (its
 * containers stop, those with a restart policy start again); drop the network (the cloud and
 * the registry the release downloads from) or fill the disk, each for a hold time, then undo it.
 */
export const FAULTS = ['power-cut', 'supervisor-kill', 'engine-restart', 'network-drop', 'disk-full'] as const;
export type Fault = (typeof FAULTS)[number];

/**
 * The update's phases, in order: the new images downloading, the old release's containers
 * going, the new ones starting, and the app's own first seconds once the release runs.
 */
export const PHASES = ['download', 'stop-old', 'start-new', 'first-seconds'] as const;
export type Phase = (typeof PHASES)[number];

/** A measured update: when each phase began, in ms from the hand-over of the new target. */
export interface UpdateWindow {
  readonly phases: ReadonlyArray<{ readonly phase: Phase; readonly startMs: number }>;
  /** The end of the last phase: the release ran this long, plus the app's first seconds. */
  readonly totalMs: number;
}

export interface SweepPoint {
  /** `<fault>@<offset ms>`: what `--only` takes to run this point again. */
  readonly id: string;
  readonly fault: Fault;
  readonly offsetMs: number;
  readonly phase: Phase;
}

export function isFault(name: string): name is Fault {
  return (FAULTS as readonly string[]).includes(name);
}

/** The phase a moment of the window falls in (the last one past its end). */
export function phaseAt(window: UpdateWindow, offsetMs: number): Phase {
  let phase: Phase = window.phases[0]?.phase ?? 'download';
  for (const p of window.phases) if (offsetMs >= p.startMs) phase = p.phase;
  return phase;
}

export function pointOf(window: UpdateWindow, fault: Fault, offsetMs: number): SweepPoint {
  return { id: `${fault}@${offsetMs}`, fault, offsetMs, phase: phaseAt(window, offsetMs) };
}

/**
 * `count` points over the window, each phase getting its share: a phase of a fraction of a
 * second (the old release stopping) is where an update is most fragile, and points spread
 * evenly over time would leave it almost none beside the app's long first seconds. So every
 * phase first gets `floor(count / (2 × phases))`, and the rest go by length (largest
 * remainder). Inside a phase, point j lands in slice j of equal slices, at a seeded place; in
 * offset order, the faults take turns. The same window and seed draw the same points.
 */
export function planPoints(o: { window: UpdateWindow; faults: readonly Fault[]; count: number; seed: number }): SweepPoint[] {
  if (!Number.isInteger(o.count) || o.count < 1) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `sweep: --points must be a whole number of at least 1, not ${o.count}`);
  if (o.faults.length === 0) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `sweep: name at least one fault (${FAULTS.join(', ')})`);
  const random = seededRandom(o.seed);
  const spans = phaseSpans(o.window);
  const shares = shareOut(o.count, spans.map((s) => s.endMs - s.startMs));
  const offsets = spans.flatMap((span, i) => {
    const slice = (span.endMs - span.startMs) / shares[i]!;
    return Array.from({ length: shares[i]! }, (_, j) => Math.min(span.endMs - 1, Math.round(span.startMs + (j + random()) * slice)));
  });
  return offsets.sort((a, b) => a - b).map((offset, i) => pointOf(o.window, o.faults[i % o.faults.length]!, offset));
}

/** Each phase from its start to the next one's (the last to the window's end); empty ones left out. */
function phaseSpans(window: UpdateWindow): Array<{ startMs: number; endMs: number }> {
  return window.phases
    .map((p, i) => ({ startMs: p.startMs, endMs: window.phases[i + 1]?.startMs ?? window.totalMs }))
    .filter((s) => s.endMs > s.startMs);
}

/** `count` shared out over `lengths`: a floor for each, the rest by length, largest remainder first. */
function shareOut(count: number, lengths: readonly number[]): number[] {
  const floor = Math.floor(count / (2 * lengths.length));
  const rest = count - floor * lengths.length;
  const total = lengths.reduce((a, b) => a + b, 0);
  const exact = lengths.map((l) => (rest * l) / total);
  const shares = exact.map((e) => floor + Math.floor(e));
  let left = count - shares.reduce((a, b) => a + b, 0);
  for (const i of exact.map((e, i) => ({ i, r: e - Math.floor(e) })).sort((a, b) => b.r - a.r).map((x) => x.i)) {
    if (left-- <= 0) break;
    shares[i]!++;
  }
  return shares;
}

/** `--only <fault>@<ms>`: one point, as a sweep's table names it. */
export function parsePointId(text: string): { fault: Fault; offsetMs: number } {
  const m = /^([a-z-]+)@(\d+)$/.exec(text.trim());
  if (!m || !isFault(m[1]!)) {
    throw new FleetlabError('SUP_ERR_BAD_REQUEST', `sweep: --only takes a point as the table names it, <fault>@<ms> (faults: ${FAULTS.join(', ')}), not ${JSON.stringify(text)}`);
  }
  return { fault: m[1] as Fault, offsetMs: Number(m[2]) };
}

/** The faults named on the command line, checked. */
export function parseFaults(names: readonly string[]): Fault[] {
  const unknown = names.filter((n) => !isFault(n));
  if (unknown.length) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `sweep: unknown fault ${unknown.map((u) => JSON.stringify(u)).join(', ')}; this version injects ${FAULTS.join(', ')}`);
  return [...new Set(names as Fault[])];
}
