/**
 * Applies a device's state report: device fields (status, versions, addresses), the running
 * release, and one image_install per service (status, download progress). `apps` comes whole
 * when present, so installs missing from it are gone from the device.
 *
 * PostgreSQL writes it in one statement (state-report-postgres.ts): its pool is shared by
 * every request of a replica, and a transaction of several round trips holds a connection
 * for all of them. SQLite runs in this process, where a statement costs no round trip and
 * the connection's queue serialises writers anyway: there it stays a transaction of small
 * statements, below.
 */
import { FleetlabError } from '../../errors.js';
import type { DeviceReport } from '../../protocol/device-cloud.js';
import type { Db, SqlValue } from '../db/port.js';
import { applyReportInOneStatement } from './state-report-postgres.js';
import { deviceColumns, runningRelease } from './state-report-rows.js';

export { runningRelease } from './state-report-rows.js';

export async function applyReport(db: Db, deviceId: number, report: DeviceReport, now: Date): Promise<void> {
  if (db.dialect.name === 'postgres') return applyReportInOneStatement(db, deviceId, report, now);
  return applyReportStepwise(db, deviceId, report, now);
}

async function applyReportStepwise(db: Db, deviceId: number, report: DeviceReport, now: Date): Promise<void> {
  await db.transaction(async (tx) => {
    const sets: string[] = [];
    const params: SqlValue[] = [];
    for (const column of deviceColumns) {
      if (report[column] !== undefined) {
        sets.push(`${column} = ?`);
        params.push(report[column]!);
      }
    }
    if (report.update_failed !== undefined) {
      sets.push('update_failed = ?');
      params.push(report.update_failed);
    }
    // Only releases of the device's own fleet may be recorded (running, or providing an install).
    const fleetReleases = report.apps
      ? new Set((await tx.query<{ id: number }>('SELECT r.id FROM "release" r JOIN "device" d ON d.belongs_to__application = r.belongs_to__application WHERE d.id = ?', [deviceId])).map((r) => Number(r.id)))
      : new Set<number>();
    const running = runningRelease(report);
    if (running !== undefined) {
      sets.push('is_running__release = ?');
      params.push(running !== null && fleetReleases.has(running) ? running : null);
    }
    sets.push('api_heartbeat_state = ?', 'last_connectivity_event = ?', 'modified_at = ?');
    params.push('online', now.toISOString(), now.toISOString());
    await tx.query(`UPDATE "device" SET ${sets.join(', ')} WHERE id = ?`, [...params, deviceId]);
    if (!report.apps) return;
    const seen: number[] = [];
    for (const app of Object.values(report.apps)) {
      for (const s of Object.values(app.services)) {
        if (s.image_id === undefined) continue;
        const image = await tx.query<{ id: number }>(
          `SELECT i.id FROM "image" i JOIN "service" s ON s.id = i.is_a_build_of__service JOIN "device" d ON d.belongs_to__application = s.application
            WHERE i.id = ? AND d.id = ?`,
          [s.image_id, deviceId],
        );
        if (!image.length) throw new FleetlabError('CLOUD_ERR_BAD_REQUEST', `image ${s.image_id} is not an image of this device's fleet`);
        seen.push(s.image_id);
        const release = s.release_id !== undefined && fleetReleases.has(s.release_id) ? s.release_id : null;
        const updated = await tx.query<{ id: number }>(
          'UPDATE "image_install" SET status = ?, download_progress = ?, is_provided_by__release = ? WHERE device = ? AND installs__image = ? RETURNING id',
          [s.status, s.download_progress, release, deviceId, s.image_id],
        );
        if (!updated.length) {
          await tx.query(
            'INSERT INTO "image_install" (created_at, device, installs__image, is_provided_by__release, status, download_progress, install_date) VALUES (?, ?, ?, ?, ?, ?, ?)',
            [now.toISOString(), deviceId, s.image_id, release, s.status, s.download_progress, now.toISOString()],
          );
        }
      }
    }
    const keep = seen.length ? ` AND installs__image NOT IN (${seen.map(() => '?').join(', ')})` : '';
    await tx.query(`DELETE FROM "image_install" WHERE device = ?${keep}`, [deviceId, ...seen]);
  });
}
