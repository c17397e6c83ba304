/**
 * A timeline as one self-contained HTML page: inline CSS, an SVG with a group per lane, and a
 * small inline script (page-script.ts) that places everything on the time axis and zooms,
 * pans, hides lanes and shows a mark's text on hover. No network, no build step: the page
 * opens from the Playwright report and from disk alike. Pure: a timeline in, text out.
 *
 * Each drawn thing carries its times (`data-a`, `data-b`, in ms from the test's start) and the
 * script computes x from them, so zooming is arithmetic on attributes rather than a re-render.
 */
import type { AbsentLane, EventLane, Lane, LevelLane, SeriesLane, Timeline } from './model.js';
import { PAGE_SCRIPT } from './page-script.js';

const ROW_H = 18;
const LEVEL_H = 28;
const SERIES_H = 44;
const LANE_GAP = 10;
/** The label column; the plot is the rest of the page's width. */
export const LABEL_W = 170;

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const ms = (n: number) => String(Math.round(n));

export function renderTimelineHtml(timeline: Timeline): string {
  let y = 24; // below the axis
  const lanes = timeline.lanes.map((lane) => {
    const { svg, height } = renderLane(lane);
    const g = `<g class="lane" data-lane="${esc(lane.id)}" data-h="${height}" transform="translate(0,${y})">${svg}</g>`;
    y += height + LANE_GAP;
    return g;
  });
  const f = timeline.failure;
  const failure = f
    ? `<g class="failure" data-a="${ms(f.at)}" data-text="${esc(`failed: ${f.error}`)}"><line class="failure-line" x1="3" x2="3" y1="0" y2="${y}"/><rect class="failure-hit" y="0" width="7" height="${y}"/></g>`
    : '';
  const toggles = timeline.lanes.map((l) => `<label><input type="checkbox" checked data-toggle="${esc(l.id)}"> ${esc(l.name)}${l.dropped ? ` <small>(${l.dropped} oldest left out)</small>` : ''}</label>`).join('');
  const notes = timeline.notes.length ? `<ul class="notes">${timeline.notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul>` : '';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>${esc(timeline.title)} — device timeline</title>
<style>${CSS}</style></head>
<body>
<header>
<h1>${esc(timeline.title)}</h1>
<p class="subject">${esc(timeline.subject)} · ${(timeline.end / 1000).toFixed(1)} s · started ${esc(new Date(timeline.origin).toISOString())}</p>
${f ? failureText(f) : ''}
<div class="toggles">${toggles}</div>
${notes}
<p class="help">wheel: zoom at the pointer · drag: pan · double-click: whole test · hover a mark for its text</p>
</header>
<svg id="plot" xmlns="http://www.w3.org/2000/svg" data-end="${ms(timeline.end)}" data-label-w="${LABEL_W}" height="${y + 4}">
<g id="axis"></g>
${lanes.join('\n')}
${failure}
</svg>
<div id="tip" hidden></div>
<script type="application/json" id="timeline-data">${JSON.stringify({ version: timeline.version, origin: timeline.origin, end: timeline.end }).replace(/</g, '\\u003c')}</script>
<script>${PAGE_SCRIPT}</script>
</body></html>
`;
}

/** The error's first lines in view, the rest (a diff, a call log) one click away. */
function failureText(f: NonNullable<Timeline['failure']>): string {
  const lines = f.error.split('\n');
  const head = `<p class="failure-text">failed at +${(f.at / 1000).toFixed(3)} s: ${esc(lines.slice(0, 2).join('\n').trim())}</p>`;
  return lines.length > 2 ? `${head}<details class="failure-more"><summary>the whole error</summary><pre>${esc(f.error)}</pre></details>` : head;
}

function renderLane(lane: Lane): { svg: string; height: number } {
  if (lane.kind === 'level') return levelLane(lane);
  if (lane.kind === 'series') return seriesLane(lane);
  if (lane.kind === 'absent') return absentLane(lane);
  return eventLane(lane);
}

const laneName = (lane: Lane, y: number, extra = '') => `<text class="lane-name" x="6" y="${y}">${esc(lane.name)}${extra}</text>`;

/** The points as `at,value` pairs, which the script turns into a path for the current zoom. */
const pointData = (points: ReadonlyArray<readonly [number, number]>) => points.map(([a, v]) => `${ms(a)},${v}`).join(' ');

function levelLane(lane: LevelLane): { svg: string; height: number } {
  const changes = lane.points.length;
  return {
    svg: `${laneName(lane, 17)}<text class="row-name" x="6" y="${LEVEL_H + 8}">${changes} changes</text><path class="level" data-kind="level" data-h="${LEVEL_H - 6}" data-y="3" data-p="${pointData(lane.points)}"/>`,
    height: LEVEL_H + 12,
  };
}

function seriesLane(lane: SeriesLane): { svg: string; height: number } {
  const max = Math.max(1, ...lane.points.map(([, v]) => v));
  const last = lane.points.at(-1)?.[1];
  return {
    svg: `${laneName(lane, 14)}<text class="row-name" x="6" y="30">max ${max} ${esc(lane.unit)}${last !== undefined ? `, last ${last}` : ''}</text><path class="series" data-kind="series" data-max="${max}" data-h="${SERIES_H - 6}" data-y="3" data-p="${pointData(lane.points)}"/>`,
    height: SERIES_H,
  };
}

function absentLane(lane: AbsentLane): { svg: string; height: number } {
  return { svg: `${laneName(lane, 13)}<text class="absent" x="${LABEL_W}" y="13">not provided: ${esc(lane.why)}</text>`, height: ROW_H };
}

function eventLane(lane: EventLane): { svg: string; height: number } {
  const rows: string[] = [];
  const rowOf = (row: string | undefined) => {
    const name = row ?? '';
    let i = rows.indexOf(name);
    if (i < 0) i = rows.push(name) - 1;
    return i;
  };
  // Rows in order of first appearance; computed before drawing so the heights are known.
  for (const s of lane.spans) rowOf(s.row);
  for (const m of lane.marks) rowOf(m.row);
  if (rows.length === 0) rows.push('');
  // Named rows start below the lane's name, each named in the label column.
  const head = rows.some(Boolean) ? ROW_H : 0;
  const top = (row: string | undefined) => head + rowOf(row) * ROW_H;
  const parts: string[] = [laneName(lane, 13)];
  rows.forEach((r, i) => {
    if (r) parts.push(`<text class="row-name" x="16" y="${head + i * ROW_H + 13}">${esc(r)}</text>`);
  });
  for (const s of lane.spans) {
    // The script puts the times in front of the hover text, from data-a and data-b.
    const text = `${s.row ? `${s.row}: ` : ''}${s.label}${s.detail ? ` — ${s.detail}` : ''}${s.to === undefined ? ' (open at the end)' : ''}`;
    const y = top(s.row) + 2;
    parts.push(
      `<rect class="span t-${s.tone ?? 'none'}" data-a="${ms(s.from)}"${s.to !== undefined ? ` data-b="${ms(s.to)}"` : ''} y="${y}" height="${ROW_H - 4}" data-text="${esc(text)}"/>` +
        `<text class="span-label" data-a="${ms(s.from)}"${s.to !== undefined ? ` data-b="${ms(s.to)}"` : ''} y="${y + ROW_H - 8}">${esc(s.label)}</text>`,
    );
  }
  for (const m of lane.marks) {
    parts.push(`<rect class="mark t-${m.tone ?? 'none'}" data-a="${ms(m.at)}" y="${top(m.row) + 1}" height="${ROW_H - 2}" data-text="${esc(m.text)}"/>`);
  }
  const height = head + rows.length * ROW_H;
  return { svg: parts.join(''), height };
}

const CSS = `
body{font:13px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#fff}
header{padding:10px 14px 4px}
h1{font-size:16px;margin:0 0 2px}
.subject,.help{color:#5b6475;margin:2px 0}
.failure-text{color:#b3121f;font-weight:600;margin:6px 0;white-space:pre-wrap}
.failure-more pre{color:#b3121f;margin:4px 0;font-size:12px}
.toggles label{margin-right:12px;white-space:nowrap}
.notes{color:#7a5800;margin:4px 0;padding-left:18px}
#plot{display:block;width:100%;cursor:grab;user-select:none}
#plot.dragging{cursor:grabbing}
.lane-name{font-weight:600;fill:#1d2330}
.row-name{fill:#5b6475;font-size:11px}
.absent{fill:#8a93a3;font-size:11px;font-style:italic}
.axis-line{stroke:#e3e6ec}
.axis-text{fill:#5b6475;font-size:11px}
.level{fill:none;stroke:#d98c00;stroke-width:1.5}
.series{fill:none;stroke:#2b6cb0;stroke-width:1.5}
.span{fill:#cfd6e3}
.span-label{font-size:10px;fill:#1d2330;pointer-events:none}
.mark{fill:#7d8696;width:3px}
.t-ok{fill:#9fd8a8}.mark.t-ok{fill:#2f9e44}
.t-warn{fill:#ffd58a}.mark.t-warn{fill:#e8a400}
.t-bad{fill:#f4a3a8}.mark.t-bad{fill:#d6336c}
.t-info{fill:#b9d3f5}.mark.t-info{fill:#3b82c4}
.failure-line{stroke:#d0021b;stroke-width:2}
.failure-hit{fill:#d0021b;fill-opacity:.12}
#tip{position:fixed;max-width:640px;background:#1d2330;color:#fff;padding:4px 8px;border-radius:4px;font:12px/1.35 ui-monospace,monospace;white-space:pre-wrap;pointer-events:none;z-index:2}
`;
