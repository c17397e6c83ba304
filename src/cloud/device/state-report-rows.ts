/**
 * What a device's state report writes, read from the report alone (pure): the device
 * columns it sets, the release its apps run, and one install per reported image. The two
 * writers (state-report.ts) apply it.
 */
import type { DeviceReport } from '../../protocol/device-cloud.js';

/** Device columns a report sets by name, when present. */
export const deviceColumns = ['status', 'os_version', 'supervisor_version', 'ip_address', 'mac_address'] as const;

/** The release an app runs: the one every reported service of it is Running from. */
export function runningRelease(report: DeviceReport): number | null | undefined {
  if (!report.apps) return undefined;
  const releases = new Set<number>();
  for (const app of Object.values(report.apps)) {
    for (const s of Object.values(app.services)) {
      if (s.status !== 'Running' || s.release_id === undefined) return null;
      releases.add(s.release_id);
    }
  }
  return releases.size === 1 ? [...releases][0]! : null;
}

export interface ReportedInstall {
  readonly imageId: number;
  readonly status: string;
  readonly downloadProgress: number | null;
  readonly releaseId: number | null;
}

/**
 * One install per image the report names, in the order the report first names each; an
 * image named twice keeps what was said last, as writing them one after another did.
 * Services without an image id install nothing.
 */
export function reportedInstalls(report: DeviceReport): ReportedInstall[] {
  const byImage = new Map<number, ReportedInstall>();
  for (const app of Object.values(report.apps ?? {})) {
    for (const s of Object.values(app.services)) {
      if (s.image_id === undefined) continue;
      byImage.set(s.image_id, { imageId: s.image_id, status: s.status, downloadProgress: s.download_progress, releaseId: s.release_id ?? null });
    }
  }
  return [...byImage.values()];
}
