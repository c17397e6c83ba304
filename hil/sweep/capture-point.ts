/**
 * `--capture DIR`: a broken point's device as a `fleetlab capture` bundle, taken once its
 * invariants are judged and before the device is retired, so `fleetlab replay` starts a device
 * in the state the fault left (store, containers, volumes, lock files).
 */
import { join } from 'node:path';
import { mkdirSync } from 'node:fs';
import { captureTestDevice } from '../capture/test-device.js';
import type { SweepDevice } from './device.js';

/** Journal entries kept: the point's own update, with room for a restart loop's lines. */
const JOURNAL_ENTRIES = 5_000;
/** What a point's fault may have left half done in a volume, restored by a replay. */
const VOLUME_BYTES = 16 * 1024 * 1024;

/** The bundle's path; `pointId` names it (`power-cut@1830.tar.gz`). */
export async function capturePoint(device: SweepDevice, dir: string, pointId: string): Promise<string> {
  mkdirSync(dir, { recursive: true });
  const out = join(dir, `${pointId}.tar.gz`);
  await captureTestDevice(device, out, { journalEntries: JOURNAL_ENTRIES, volumeBytes: VOLUME_BYTES });
  return out;
}
