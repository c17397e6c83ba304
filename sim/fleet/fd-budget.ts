/**
 * File descriptors are what bounds the devices of one process: each virtual device holds
 * a keep-alive connection to the cloud and its tunnel, and a partitioned one two more in
 * the link. Past the process's limit (`ulimit -n`), connections fail with EMFILE and
 * devices fail in ways that look like the cloud's fault, so a fleet checks before it starts.
 */
import { readFileSync } from 'node:fs';

/** Descriptors one device holds: its cloud connection and its tunnel. */
export const FDS_PER_DEVICE = 2;
/** Descriptors of the process itself: node, the journal, the link, headroom for bursts. */
const FDS_BASE = 512;

/** The soft limit on open files of this process, or null where /proc does not say (not Linux). */
export function openFileLimit(limitsFile = '/proc/self/limits'): number | null {
  try {
    const line = /^Max open files\s+(\d+|unlimited)\s/m.exec(readFileSync(limitsFile, 'utf8'))?.[1];
    if (!line) return null;
    return line === 'unlimited' ? Number.POSITIVE_INFINITY : Number(line);
  } catch {
    return null;
  }
}

/** How many devices one process with this limit can run (partitioned ones count double). */
export function devicesPerProcess(limit: number, partitionedShare = 0): number {
  return Math.max(1, Math.floor((limit - FDS_BASE) / (FDS_PER_DEVICE * (1 + partitionedShare))));
}

/** Processes needed to run `devices` here under this process's limit (1 where it is unknown). */
export function processesFor(devices: number, partitionedShare: number, limit = openFileLimit()): number {
  return limit === null ? 1 : Math.ceil(devices / devicesPerProcess(limit, partitionedShare));
}
