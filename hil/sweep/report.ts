/** A sweep's result as people read it: one row per point, and how to run a broken one again. */
import type { SweepResult } from './sweep.js';

const HEADER = ['point', 'phase', 'offset ms', 'fault', 'outcome', 'invariant broken', 'settle ms'];

export function sweepRows(result: SweepResult): string[][] {
  return result.points.map((p) => [p.id, p.phase, String(p.offsetMs), p.fault, p.outcome, p.broken.map((b) => `${b.invariant}: ${b.detail}`).join('; ') || '-', p.settleMs === null ? '-' : String(p.settleMs)]);
}

/** The table in plain text, columns padded; a long invariant text ends its row. */
export function sweepTable(result: SweepResult): string {
  const rows = [HEADER, ...sweepRows(result)];
  const widths = HEADER.map((_, i) => (i === 5 ? 0 : Math.max(...rows.map((r) => r[i]!.length))));
  const line = (r: string[]) => r.map((cell, i) => (i === 5 || i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ');
  return rows.map((r) => line([...r.slice(0, 5), r[6]!, r[5]!])).join('\n');
}

export function sweepSummary(result: SweepResult, rerun: (pointId: string) => string): string {
  const broken = result.points.filter((p) => p.outcome === 'broken');
  const lines = [
    `${result.points.length} points: ${result.points.length - broken.length} passed, ${broken.length} broken (seed ${result.seed}, update window ${result.window.totalMs} ms, ${Math.round(result.wallMs / 1000)} s in all)`,
    ...broken.map((p) => `  broken ${p.id}: ${rerun(p.id)}`),
  ];
  return lines.join('\n');
}
