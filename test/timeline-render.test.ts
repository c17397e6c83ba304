/**
 * The device timeline's pure half: records become lanes (hil/lib/timeline/build.ts) and lanes
 * become one self-contained page (render.ts). What the browser shows of it is checked in
 * test/timeline-browser.test.ts; here the counts, the caps and the page's size bound.
 */
import { describe, expect, it } from 'vitest';
import { buildTimeline, type Recorded } from '../hil/lib/timeline/build.js';
import { LIMITS, Ring } from '../hil/lib/timeline/model.js';
import { renderTimelineHtml } from '../hil/lib/timeline/render.js';
import type { StepEvent } from '../hil/lib/steps.js';

const O = 1_800_000_000_000;

function steps(list: Array<[protocol: string, action: string, from: number, to: number, error?: string]>): StepEvent[] {
  return list.flatMap(([protocol, action, from, to, error], i) => [
    { kind: 'start' as const, id: i + 1, protocol, action, args: undefined, at: O + from },
    { kind: 'stop' as const, id: i + 1, protocol, action, at: O + to, durationMs: to - from, ...(error ? { error } : {}) },
  ]);
}

/** What a 10-minute test with a blinking LED and a busy journal records, every list at its cap. */
function longRecording(): Recorded {
  const minutes = 10 * 60_000;
  const led = Array.from({ length: minutes / 200 }, (_, i) => ({ at: O + i * 200, value: i % 2 }));
  const line = (i: number) => `fleetlab-supervisor.service: ${'x'.repeat(400)} ${i}`;
  return {
    title: 'a long test',
    subject: 'sim',
    origin: O,
    end: O + minutes,
    failure: { at: O + minutes - 1, error: 'Error: '.padEnd(5_000, 'e') },
    steps: steps(Array.from({ length: LIMITS.steps }, (_, i) => ['api', 'request', i * 300, i * 300 + 20] as [string, string, number, number])),
    led: { line: 'gpio 529', initial: 0, transitions: led },
    containers: { events: Array.from({ length: LIMITS.containerEvents }, (_, i) => ({ at: O + i * 300, action: i % 2 ? 'die' : 'start', name: `service-${i % 5}`, ...(i % 2 ? { exitCode: 1 } : {}) })), dropped: 0 },
    states: { samples: Array.from({ length: LIMITS.stateChanges }, (_, i) => ({ at: O + i * 600, status: i % 2 ? 'Downloading' : 'Idle', appState: 'applying', download: i % 100, locks: i % 3 ? [] : ['1/web'] })), dropped: 0 },
    journal: Array.from({ length: 20_000 }, (_, i) => ({ at: O + i * 30, text: line(i) })),
    serial: Array.from({ length: 20_000 }, (_, i) => ({ at: O + i * 30, text: line(i) })),
    usage: { samples: Array.from({ length: LIMITS.samples }, (_, i) => ({ at: O + i * 1000, cpuPercent: 12.5, rssBytes: 90e6 })), dropped: 0 },
  };
}

describe('device timeline', () => {
  it('turns steps, the LED, engine events, states and lines into lanes', () => {
    const t = buildTimeline({
      title: 't',
      subject: 'sim',
      origin: O,
      end: O + 10_000,
      failure: { at: O + 9_000, error: 'boom' },
      steps: steps([
        ['harness', 'deploy', 0, 3_000],
        ['power', 'off', 4_000, 4_100],
        ['power', 'on', 5_000, 6_000],
        ['network', 'partition', 6_500, 6_510],
        ['network', 'heal', 7_000, 7_010],
        ['harness', 'waitForRelease', 7_100, 9_000, 'timed out'],
      ]),
      led: { line: 'gpio', initial: 0, transitions: [{ at: O + 1_000, value: 1 }, { at: O + 1_200, value: 0 }] },
      containers: { events: [{ at: O + 2_000, action: 'start', name: 'web' }, { at: O + 4_000, action: 'die', name: 'web', exitCode: 137 }], dropped: 0 },
      states: { samples: [{ at: O, status: 'Idle', appState: 'applied', locks: [] }, { at: O + 1_000, status: 'Downloading', appState: 'applying', download: 50, locks: ['1/web'] }, { at: O + 3_000, status: 'Idle', appState: 'applied', locks: [] }], dropped: 0 },
      journal: [{ at: O + 500, text: 'hello' }],
    });
    const lane = (id: string) => t.lanes.find((l) => l.id === id)!;
    expect(t.lanes.map((l) => l.id)).toEqual(['led', 'power', 'network', 'containers', 'supervisor', 'steps', 'journal']);
    expect(lane('led')).toMatchObject({ points: [[0, 0], [1_000, 1], [1_200, 0]] });
    expect(lane('power')).toMatchObject({ spans: [{ from: 4_000, to: 6_000, label: 'cut' }] });
    expect(lane('network')).toMatchObject({ spans: [{ from: 6_500, to: 7_010, label: 'partitioned' }] });
    expect(lane('containers')).toMatchObject({ spans: [{ from: 2_000, to: 4_000, label: 'running (exit 137)', row: 'web' }], marks: [{ text: 'web: start' }, { text: 'web: die (exit 137)', tone: 'bad' }] });
    const states = lane('supervisor');
    expect(states.kind === 'events' && states.spans.filter((s) => s.row === 'lock')).toEqual([{ from: 1_000, to: 3_000, label: 'held: 1/web', row: 'lock', tone: 'warn' }]);
    expect(states.kind === 'events' && states.spans.find((s) => s.row === 'download')).toMatchObject({ from: 1_000, to: 3_000, label: '50%' });
    const stepLane = lane('steps');
    expect(stepLane.kind === 'events' && stepLane.spans.find((s) => s.label === 'waitForRelease')).toMatchObject({ tone: 'bad', detail: 'harness.waitForRelease 1900 ms: timed out' });
    expect(t.failure).toEqual({ at: 9_000, error: 'boom' });

    const html = renderTimelineHtml(t);
    expect(html.match(/<g class="lane"/g)).toHaveLength(7);
    expect(html.match(/<g class="failure"/g)).toHaveLength(1);
    expect(html).not.toMatch(/<(script|link|img)[^>]+(src|href)=/);
  });

  it('draws a lane the target cannot record as not provided, with why, in its place', () => {
    const t = buildTimeline({
      title: 't',
      subject: 'qemu',
      origin: O,
      end: O + 1_000,
      journal: [{ at: O + 500, text: 'hello' }],
      absent: { led: 'no LED observer', cpu: 'no /proc', rss: 'no /proc', journal: 'recorded anyway' },
    });
    // A lane that was recorded is kept whatever the absent list says.
    expect(t.lanes.map((l) => [l.id, l.kind])).toEqual([['led', 'absent'], ['journal', 'events'], ['cpu', 'absent'], ['rss', 'absent']]);
    const html = renderTimelineHtml(t);
    expect(html.match(/<g class="lane"/g)).toHaveLength(4);
    expect(html).toContain('<text class="absent" x="170" y="13">not provided: no LED observer</text>');
  });

  it('keeps the newest entries at its caps, and says how many it left out', () => {
    const ring = new Ring<number>(3);
    for (let i = 0; i < 10; i++) ring.push(i);
    expect([ring.toArray(), ring.dropped]).toEqual([[7, 8, 9], 7]);
    const t = buildTimeline(longRecording());
    const journal = t.lanes.find((l) => l.id === 'journal')!;
    expect(journal.kind === 'events' && [journal.marks.length, journal.dropped]).toEqual([LIMITS.lines, 20_000 - LIMITS.lines]);
    expect(journal.kind === 'events' && journal.marks.at(-1)!.text.length).toBe(LIMITS.textChars);
  });

  it('stays under 2 MB for a 10-minute test at every cap (a blinking LED, a busy journal and console)', () => {
    const html = renderTimelineHtml(buildTimeline(longRecording()));
    // The figure the docs state; every lane full, every line at its longest.
    expect(html.length).toBeLessThan(2 * 1024 * 1024);
    console.log(`timeline page of a 10-minute test at every cap: ${(html.length / 1024 / 1024).toFixed(2)} MB`);
  });
});
