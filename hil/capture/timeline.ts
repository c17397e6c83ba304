/**
 * `fleetlab bundle show --html`: a captured device on the same kind of timeline a failed test
 * gets. A bundle holds no recording, so the lanes are what it kept: the journal (the supervisor's
 * log lines among it), each container's life as the engine's inspect data dates it (created,
 * started, finished with its exit code, restarts counted), and the state the supervisor
 * reported when the capture ran. Pure: a bundle in, a timeline out.
 */
import type { Bundle } from './bundle.js';
import { buildTimeline, type ContainerEvent, type TextLine } from '../lib/timeline/build.js';
import type { EventLane, Timeline } from '../lib/timeline/model.js';

interface InspectedContainer {
  Name?: string;
  Created?: string;
  RestartCount?: number;
  State?: { Status?: string; Running?: boolean; ExitCode?: number; StartedAt?: string; FinishedAt?: string; OOMKilled?: boolean };
}

interface JournalEntry {
  MESSAGE?: unknown;
  __REALTIME_TIMESTAMP?: string;
  _SYSTEMD_UNIT?: string;
  SYSLOG_IDENTIFIER?: string;
}

/** The engine writes 0001-01-01 for a time that never was. */
const when = (iso: string | undefined) => {
  const ms = iso ? Date.parse(iso) : NaN;
  return Number.isFinite(ms) && ms > 0 ? ms : undefined;
};

function journalLines(bundle: Bundle): TextLine[] {
  if (!bundle.has('journal/journal.jsonl')) return [];
  const out: TextLine[] = [];
  for (const line of bundle.text('journal/journal.jsonl').split('\n')) {
    if (!line) continue;
    try {
      const e = JSON.parse(line) as JournalEntry;
      const at = Math.floor(Number(e.__REALTIME_TIMESTAMP) / 1000);
      // journald gives a message it could not read as text as an array of bytes.
      const message = typeof e.MESSAGE === 'string' ? e.MESSAGE : Array.isArray(e.MESSAGE) ? Buffer.from(e.MESSAGE as number[]).toString('utf8') : '';
      if (Number.isFinite(at)) out.push({ at, text: `${e._SYSTEMD_UNIT ?? e.SYSLOG_IDENTIFIER ?? '-'}: ${message}` });
    } catch {
      // A torn last line of a capture cut short: the rest still reads.
    }
  }
  return out;
}

function containerEvents(bundle: Bundle): ContainerEvent[] {
  if (!bundle.has('engine/containers.json')) return [];
  const events: ContainerEvent[] = [];
  for (const c of bundle.json<InspectedContainer[]>('engine/containers.json')) {
    const name = (c.Name ?? '?').replace(/^\//, '');
    const created = when(c.Created);
    const started = when(c.State?.StartedAt);
    const finished = when(c.State?.FinishedAt);
    if (created) events.push({ at: created, action: 'create', name });
    // Only the last run of a container is dated; earlier restarts are counted, not placed.
    if (finished && !c.State?.Running && (!started || finished >= started)) {
      if (started) events.push({ at: started, action: 'start', name });
      events.push({ at: finished, action: c.State?.OOMKilled ? 'oom' : 'die', name, exitCode: c.State?.ExitCode ?? 0 });
    } else {
      if (finished && started && finished < started) events.push({ at: finished, action: 'die', name });
      if (started) events.push({ at: started, action: c.RestartCount ? `start (restart ${c.RestartCount})` : 'start', name });
    }
  }
  return events.sort((a, b) => a.at - b.at);
}

export function bundleTimeline(bundle: Bundle): Timeline {
  const m = bundle.manifest;
  const capturedAt = Date.parse(m.createdAt);
  const journal = journalLines(bundle);
  const containers = containerEvents(bundle);
  const status = bundle.has('state/status.json') ? bundle.json<{ status?: string; appState?: string; overallDownloadProgress?: number | null }>('state/status.json') : undefined;
  const origin = Math.min(capturedAt, ...journal.map((l) => l.at), ...containers.map((e) => e.at));
  const notes = [
    'a bundle holds no recording: containers are dated by the engine (each one\'s creation and its last start and exit; earlier restarts only counted), the supervisor state is the one reported at capture (the page\'s end)',
    ...m.steps.filter((s) => s.status !== 'ok').map((s) => `not captured: ${s.name}${s.error ? ` (${s.error})` : ''}`),
  ];
  const timeline = buildTimeline({
    title: `bundle ${bundle.path}`,
    subject: `captured ${m.createdAt} from ${m.source.kind} ${m.source.address}${m.source.uuid ? ` (device ${m.source.uuid})` : ''}`,
    origin,
    end: capturedAt + 1,
    containers: { events: containers, dropped: 0 },
    journal,
    notes,
  });
  if (!status) return timeline;
  // One report, at the capture: a mark at the page's end rather than a span of no width.
  const progress = status.overallDownloadProgress === null || status.overallDownloadProgress === undefined ? '' : `, download ${status.overallDownloadProgress}%`;
  const state: EventLane = { kind: 'events', id: 'supervisor', name: 'supervisor state', spans: [], marks: [{ at: capturedAt - origin, text: `at capture: ${status.status ?? '?'}, apps ${status.appState ?? '?'}${progress}`, tone: 'info' }], dropped: 0 };
  return { ...timeline, lanes: [timeline.lanes[0]!, state, ...timeline.lanes.slice(1)] };
}
