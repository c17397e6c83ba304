/**
 * Why devices have not settled, over the whole fleet: every unsettled device counted under
 * its phase and reason, numbers folded ("3 polls failed" and "4 polls failed" count
 * together), each group with one device as its example and how many of it each process runs.
 * Grouped where the devices run, so ten thousand reasons never cross a process; merged after.
 */
import type { FaultKind } from './fault-plan.js';
import type { DevicePhase } from './fleet-device.js';

/** A device that has not settled on a release, and why (Fleet.stuck). */
export interface StuckDevice {
  readonly index: number;
  readonly uuid: string | null;
  readonly phase: DevicePhase;
  readonly releaseId: number | null;
  readonly faults: readonly FaultKind[];
  readonly reason: string;
}

export interface UnsettledGroup {
  /** The phase and the reason with its numbers folded to N: what the group is counted by. */
  readonly key: string;
  readonly count: number;
  readonly example: StuckDevice;
  /** Devices of the group per process (its range label: `1/2` is the first of two). */
  readonly where: Readonly<Record<string, number>>;
}

const keyOf = (s: StuckDevice) => `${s.phase}: ${s.reason.replace(/\d+/g, 'N')}`;

/** Groups the unsettled devices of one process, most first. */
export function groupUnsettled(devices: Iterable<StuckDevice>, where: string): UnsettledGroup[] {
  const groups = new Map<string, { count: number; example: StuckDevice }>();
  for (const s of devices) {
    const key = keyOf(s);
    const g = groups.get(key);
    if (g) g.count += 1;
    else groups.set(key, { count: 1, example: s });
  }
  return byCount([...groups].map(([key, g]) => ({ key, count: g.count, example: g.example, where: { [where]: g.count } })));
}

/** One list from each process's groups, most first; a group's example is the first process's. */
export function mergeUnsettled(parts: readonly (readonly UnsettledGroup[])[]): UnsettledGroup[] {
  const merged = new Map<string, { count: number; example: StuckDevice; where: Record<string, number> }>();
  for (const part of parts) {
    for (const g of part) {
      const m = merged.get(g.key);
      if (!m) merged.set(g.key, { count: g.count, example: g.example, where: { ...g.where } });
      else {
        m.count += g.count;
        for (const [w, n] of Object.entries(g.where)) m.where[w] = (m.where[w] ?? 0) + n;
      }
    }
  }
  return byCount([...merged].map(([key, m]) => ({ key, ...m })));
}

const byCount = (groups: UnsettledGroup[]) => groups.sort((a, b) => b.count - a.count || a.key.localeCompare(b.key));

/** Lines for a person: `N× phase (device i; where): reason`, the largest `limit` groups. */
export function describeUnsettled(groups: readonly UnsettledGroup[], limit = 8): string[] {
  const lines = groups.slice(0, limit).map((g) => {
    const where = Object.entries(g.where).map(([w, n]) => `${n} in process ${w}`).join(', ');
    return `  ${g.count}× ${g.example.phase} (${where}; e.g. device ${g.example.index}): ${g.example.reason}`;
  });
  const rest = groups.slice(limit).reduce((n, g) => n + g.count, 0);
  if (rest > 0) lines.push(`  ${rest} more in ${groups.length - limit} other groups`);
  return lines;
}
