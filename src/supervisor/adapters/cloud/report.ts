/**
 * The state report (pure): what the device would tell the cloud now, and the part of it that
 * differs from what the cloud last acknowledged. Sending only the difference keeps a fleet's
 * report traffic proportional to change, not to size.
 */
import type { DeviceReport } from '../../../protocol/device-cloud.js';
import type { DeviceView } from '../../state/status.js';

export interface ReportContext {
  readonly osVersion: string;
  readonly supervisorVersion: string;
  readonly ipAddress: string;
  readonly macAddress: string;
  readonly apiPort: number;
  readonly updateFailed: boolean;
}

export function currentReport(view: DeviceView, ctx: ReportContext): DeviceReport {
  const apps: NonNullable<DeviceReport['apps']> = {};
  for (const s of view.services) {
    const app = (apps[String(s.appId)] ??= { release_id: s.releaseId, commit: view.commits.get(s.appId) ?? null, services: {} });
    app.services[s.serviceName] = { image: s.image, image_id: s.imageId, status: s.status, download_progress: s.downloadProgress, release_id: s.releaseId };
  }
  return {
    status: view.status,
    is_online: true,
    os_version: ctx.osVersion,
    supervisor_version: ctx.supervisorVersion,
    ip_address: ctx.ipAddress,
    mac_address: ctx.macAddress,
    api_port: ctx.apiPort,
    download_progress: view.downloadProgress,
    update_pending: view.appState === 'applying',
    update_downloaded: view.images.length > 0 && view.images.every((i) => i.status === 'Downloaded') && view.appState === 'applying',
    update_failed: ctx.updateFailed,
    apps,
  };
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** Fields of `next` that differ from `acked`; `apps` goes whole when any app changed. */
export function changedFields(acked: DeviceReport, next: DeviceReport): DeviceReport {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(next)) {
    if (!same(value, (acked as Record<string, unknown>)[key])) out[key] = value;
  }
  return out as DeviceReport;
}
