/** A sweep's result as people read it: one row per point, and how to run a broken one again. */
import type { SweepResult } from './sweep.js';
import { alignColumns } from '../lib/text-table.js';

const HEADER = ['point', 'phase', 'offset ms', 'fault', 'outcome', 'settle ms', 'invariant broken'];

export function sweepRows(result: SweepResult): string[][] {
  return result.points.map((p) => [p.id, p.phase, String(p.offsetMs), p.fault, p.outcome, p.settleMs === null ? '-' : String(p.settleMs), p.broken.map((b) => `${b.invariant}: ${b.detail}`).join('; ') || '-']);
}

/** The table in plain text; the invariants broken, often long, end each row. */
export function sweepTable(result: SweepResult): string {
  return alignColumns([HEADER, ...sweepRows(result)]).join('\n');
}

export function sweepSummary(result: SweepResult, rerun: (pointId: string) => string): string {
  const broken = result.points.filter((p) => p.outcome === 'broken');
  const lines = [
    `${result.points.length} points: ${result.points.length - broken.length} passed, ${broken.length} broken (seed ${result.seed}, update window ${result.window.totalMs} ms, ${Math.round(result.wallMs / 1000)} s in all)`,
    ...broken.flatMap((p) => [
      `  broken ${p.id}: ${rerun(p.id)}`,
      ...(p.timeline ? ['path' in p.timeline ? `    its timeline: ${p.timeline.path}` : `    its timeline could not be drawn: ${p.timeline.error}`] : []),
      ...(p.capture ? ['path' in p.capture ? `    its device: ${p.capture.path} (fleetlab replay ${p.capture.path})` : `    its device could not be captured: ${p.capture.error}`] : []),
    ]),
  ];
  return lines.join('\n');
}
