/**
 * A state report on PostgreSQL in one statement, so one round trip. Done statement by
 * statement (state-report.ts, as SQLite still does it), a report of one service was eight
 * round trips inside BEGIN..COMMIT, and the pool connection was held across every await
 * between them: on a busy replica each await is a turn of the event loop, so a fleet's
 * reports held the pool for tens of milliseconds each and target-state polls queued behind
 * them (docs/profiles/state-report-postgres.md). A single statement is atomic on its own,
 * takes the connection for one exchange, and its text never varies, so it is prepared once
 * per connection.
 *
 * Its writes (the device row, the upserted installs, the installs the device no longer has)
 * are data-modifying CTEs: they see one snapshot and always run to completion, so each is
 * guarded by "no reported image is foreign to the device's fleet"; when one is, nothing is
 * written and the caller answers 400, as the rolled-back transaction did.
 */
import { FleetlabError } from '../../errors.js';
import type { DeviceReport } from '../../protocol/device-cloud.js';
import type { Db } from '../db/port.js';
import { deviceColumns, reportedInstalls, runningRelease } from './state-report-rows.js';

/**
 * `fields` holds only the columns the report carries (all non-null by the report's schema),
 * so COALESCE keeps the others. No trigger watches these columns (migrations 005 and 007
 * watch uuid, name, fleet, target release and actor), so naming them all costs nothing.
 */
const REPORT_SQL = `WITH input AS (SELECT CAST(? AS jsonb) AS fields, CAST(? AS boolean) AS apps),
  dev AS (SELECT id, belongs_to__application AS app FROM "device" WHERE id = ?),
  reported AS (SELECT * FROM jsonb_to_recordset(CAST(? AS jsonb)) AS s(image_id integer, status text, download_progress integer, release_id integer)),
  fleet_release AS (SELECT r.id FROM "release" r JOIN dev ON r.belongs_to__application = dev.app),
  foreign_image AS (
    SELECT s.image_id FROM reported s
     WHERE NOT EXISTS (SELECT 1 FROM "image" i JOIN "service" sv ON sv.id = i.is_a_build_of__service JOIN dev ON sv.application = dev.app WHERE i.id = s.image_id)),
  device_update AS (
    UPDATE "device" d SET
      ${deviceColumns.map((c) => `${c} = COALESCE(input.fields ->> '${c}', d.${c})`).join(',\n      ')},
      update_failed = COALESCE(CAST(input.fields ->> 'update_failed' AS boolean), d.update_failed),
      is_running__release = CASE WHEN input.fields -> 'is_running__release' IS NULL THEN d.is_running__release
        ELSE (SELECT fr.id FROM fleet_release fr WHERE fr.id = CAST(input.fields ->> 'is_running__release' AS integer)) END,
      api_heartbeat_state = 'online', last_connectivity_event = ?, modified_at = ?
      FROM input WHERE d.id = (SELECT id FROM dev) AND NOT EXISTS (SELECT 1 FROM foreign_image)
    RETURNING d.id),
  install_upsert AS (
    INSERT INTO "image_install" AS ii (created_at, device, installs__image, is_provided_by__release, status, download_progress, install_date)
    SELECT ?, dev.id, s.image_id, (SELECT fr.id FROM fleet_release fr WHERE fr.id = s.release_id), s.status, s.download_progress, ?
      FROM reported s CROSS JOIN dev
     WHERE NOT EXISTS (SELECT 1 FROM foreign_image)
    ON CONFLICT (device, installs__image) DO UPDATE SET status = excluded.status, download_progress = excluded.download_progress, is_provided_by__release = excluded.is_provided_by__release
    RETURNING ii.id),
  install_delete AS (
    DELETE FROM "image_install" WHERE device = (SELECT id FROM dev) AND (SELECT apps FROM input) AND NOT EXISTS (SELECT 1 FROM foreign_image)
       AND installs__image NOT IN (SELECT image_id FROM reported)
    RETURNING id)
SELECT (SELECT array_agg(image_id) FROM foreign_image) AS foreign_images`;

export async function applyReportInOneStatement(db: Db, deviceId: number, report: DeviceReport, now: Date): Promise<void> {
  const fields: Record<string, unknown> = {};
  for (const column of deviceColumns) if (report[column] !== undefined) fields[column] = report[column];
  if (report.update_failed !== undefined) fields.update_failed = report.update_failed;
  const running = runningRelease(report);
  if (running !== undefined) fields.is_running__release = running;
  const installs = reportedInstalls(report);
  const at = now.toISOString();
  const [row] = await db.query<{ foreign_images: number[] | null }>(REPORT_SQL, [
    JSON.stringify(fields),
    report.apps !== undefined,
    deviceId,
    JSON.stringify(installs.map((s) => ({ image_id: s.imageId, status: s.status, download_progress: s.downloadProgress, release_id: s.releaseId }))),
    at,
    at,
    at,
    at,
  ]);
  const foreign = new Set((row?.foreign_images ?? []).map(Number));
  const first = installs.find((s) => foreign.has(s.imageId));
  if (first) throw new FleetlabError('CLOUD_ERR_BAD_REQUEST', `image ${first.imageId} is not an image of this device's fleet`);
}
