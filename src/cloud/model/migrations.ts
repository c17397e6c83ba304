/**
 * Schema migrations, the same text for SQLite and PostgreSQL. A few tokens stand for what
 * the two spell differently; `renderDdl` in the dialect module expands them:
 *   {pk}            the auto-increment integer primary key `id`
 *   {fk_late:T:ON}  a foreign key to a table created later (SQLite: inline; PostgreSQL: the
 *                   statement marked `-- pg-late` adds it once every table exists)
 * Migrations are frozen once shipped: a model change is a new entry, never an edit.
 * A plain migration table (name, applied_at) is all the bookkeeping needed for a list run
 * in order inside one transaction; umzug would add a second abstraction for that.
 */
import type { DialectName } from '../db/dialect.js';
import type { Db } from '../db/port.js';

export interface Migration {
  name: string;
  statements: string[];
  /** What the two databases spell too differently for tokens (triggers); run after `statements`. */
  only?: Partial<Record<DialectName, string[]>>;
}

/** What migration 007's triggers notify when a key, or what one names, changes (src/cloud/auth/principal-cache.ts). */
export const KEYS_CHANNEL = 'fleetlab_keys';

const ts = 'TEXT NOT NULL';
const fk = (t: string, on: 'CASCADE' | 'RESTRICT' | 'SET NULL') => `INTEGER REFERENCES "${t}"(id) ON DELETE ${on}`;

export const migrations: Migration[] = [
  {
    name: '001-initial',
    statements: [
      `CREATE TABLE "actor" (id {pk}, created_at ${ts})`,
      `CREATE TABLE "user" (id {pk}, created_at ${ts}, actor INTEGER NOT NULL UNIQUE, username TEXT NOT NULL UNIQUE, email TEXT, is_admin BOOLEAN NOT NULL DEFAULT FALSE)`,
      `CREATE TABLE "organization" (id {pk}, created_at ${ts}, name TEXT NOT NULL, handle TEXT NOT NULL UNIQUE)`,
      `CREATE TABLE "organization_membership" (id {pk}, created_at ${ts}, "user" ${fk('user', 'CASCADE')} NOT NULL, is_member_of__organization ${fk('organization', 'CASCADE')} NOT NULL, UNIQUE ("user", is_member_of__organization))`,
      `CREATE TABLE "device_type" (id {pk}, created_at ${ts}, slug TEXT NOT NULL UNIQUE, name TEXT NOT NULL)`,
      `CREATE TABLE "application" (id {pk}, created_at ${ts}, app_name TEXT NOT NULL, slug TEXT NOT NULL UNIQUE, uuid TEXT NOT NULL UNIQUE, actor INTEGER NOT NULL UNIQUE,
        should_track_latest_release BOOLEAN NOT NULL DEFAULT TRUE, is_host BOOLEAN NOT NULL DEFAULT FALSE, is_public BOOLEAN NOT NULL DEFAULT FALSE,
        is_archived BOOLEAN NOT NULL DEFAULT FALSE, is_of__class TEXT NOT NULL DEFAULT 'fleet',
        organization ${fk('organization', 'RESTRICT')} NOT NULL, is_for__device_type ${fk('device_type', 'RESTRICT')} NOT NULL,
        should_be_running__release INTEGER {fk_late:release:SET NULL})`,
      `CREATE INDEX application_organization ON "application" (organization)`,
      `CREATE TABLE "release" (id {pk}, created_at ${ts}, belongs_to__application ${fk('application', 'CASCADE')} NOT NULL, is_created_by__user ${fk('user', 'SET NULL')},
        "commit" TEXT NOT NULL, status TEXT NOT NULL, source TEXT, composition TEXT, semver TEXT NOT NULL DEFAULT '0.0.0', semver_major INTEGER NOT NULL DEFAULT 0,
        semver_minor INTEGER NOT NULL DEFAULT 0, semver_patch INTEGER NOT NULL DEFAULT 0, revision INTEGER, is_final BOOLEAN NOT NULL DEFAULT TRUE,
        is_invalidated BOOLEAN NOT NULL DEFAULT FALSE, note TEXT, known_issue_list TEXT, start_timestamp TEXT, end_timestamp TEXT, update_timestamp TEXT,
        release_version TEXT, UNIQUE (belongs_to__application, "commit"))`,
      `ALTER TABLE "application" ADD CONSTRAINT application_target_release FOREIGN KEY (should_be_running__release) REFERENCES "release"(id) ON DELETE SET NULL -- pg-late`,
      `CREATE TABLE "device" (id {pk}, created_at ${ts}, modified_at ${ts}, uuid TEXT NOT NULL UNIQUE, device_name TEXT NOT NULL, actor INTEGER NOT NULL UNIQUE,
        belongs_to__application ${fk('application', 'RESTRICT')} NOT NULL, is_of__device_type ${fk('device_type', 'RESTRICT')} NOT NULL,
        should_be_running__release ${fk('release', 'SET NULL')}, is_running__release ${fk('release', 'SET NULL')},
        is_online BOOLEAN NOT NULL DEFAULT FALSE, status TEXT NOT NULL DEFAULT 'Idle', api_heartbeat_state TEXT NOT NULL DEFAULT 'unknown',
        os_version TEXT, os_variant TEXT, supervisor_version TEXT, ip_address TEXT, public_address TEXT, mac_address TEXT, last_connectivity_event TEXT,
        is_active BOOLEAN NOT NULL DEFAULT TRUE, is_web_accessible BOOLEAN NOT NULL DEFAULT FALSE, note TEXT, location TEXT, latitude TEXT, longitude TEXT,
        memory_usage INTEGER, memory_total INTEGER, cpu_usage INTEGER, cpu_temp INTEGER, storage_usage INTEGER, storage_total INTEGER)`,
      `CREATE INDEX device_application ON "device" (belongs_to__application)`,
      `CREATE TABLE "device_tag" (id {pk}, created_at ${ts}, device ${fk('device', 'CASCADE')} NOT NULL, tag_key TEXT NOT NULL, value TEXT NOT NULL, UNIQUE (device, tag_key))`,
      `CREATE TABLE "application_tag" (id {pk}, created_at ${ts}, application ${fk('application', 'CASCADE')} NOT NULL, tag_key TEXT NOT NULL, value TEXT NOT NULL, UNIQUE (application, tag_key))`,
      `CREATE TABLE "device_environment_variable" (id {pk}, created_at ${ts}, device ${fk('device', 'CASCADE')} NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, UNIQUE (device, name))`,
      `CREATE TABLE "device_config_variable" (id {pk}, created_at ${ts}, device ${fk('device', 'CASCADE')} NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, UNIQUE (device, name))`,
      `CREATE TABLE "application_environment_variable" (id {pk}, created_at ${ts}, application ${fk('application', 'CASCADE')} NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, UNIQUE (application, name))`,
      `CREATE TABLE "application_config_variable" (id {pk}, created_at ${ts}, application ${fk('application', 'CASCADE')} NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, UNIQUE (application, name))`,
      `CREATE TABLE "service" (id {pk}, created_at ${ts}, application ${fk('application', 'CASCADE')} NOT NULL, service_name TEXT NOT NULL, UNIQUE (application, service_name))`,
      `CREATE TABLE "image" (id {pk}, created_at ${ts}, is_a_build_of__service ${fk('service', 'CASCADE')} NOT NULL, is_stored_at__image_location TEXT NOT NULL,
        status TEXT NOT NULL, image_size BIGINT, content_hash TEXT, project_type TEXT, dockerfile TEXT, build_log TEXT, error_message TEXT,
        start_timestamp TEXT, end_timestamp TEXT, push_timestamp TEXT)`,
      `CREATE INDEX image_service ON "image" (is_a_build_of__service)`,
      `CREATE TABLE "image__is_part_of__release" (id {pk}, created_at ${ts}, image ${fk('image', 'CASCADE')} NOT NULL, is_part_of__release ${fk('release', 'CASCADE')} NOT NULL, UNIQUE (image, is_part_of__release))`,
      `CREATE INDEX release_image_release ON "image__is_part_of__release" (is_part_of__release)`,
      `CREATE TABLE "api_key" (id {pk}, created_at ${ts}, name TEXT, description TEXT, expiry_date TEXT, is_of__actor INTEGER NOT NULL, key_hash TEXT NOT NULL UNIQUE)`,
      `CREATE INDEX api_key_actor ON "api_key" (is_of__actor)`,
    ],
  },
  {
    name: '002-image-install',
    statements: [
      `CREATE TABLE "image_install" (id {pk}, created_at ${ts}, device ${fk('device', 'CASCADE')} NOT NULL, installs__image ${fk('image', 'CASCADE')} NOT NULL,
        is_provided_by__release ${fk('release', 'SET NULL')}, status TEXT NOT NULL, download_progress INTEGER, install_date TEXT, UNIQUE (device, installs__image))`,
      `CREATE INDEX image_install_device ON "image_install" (device)`,
    ],
  },
  {
    // A device whose update failed (a pull that fails, a lock it cannot wait out) says so
    // in its report; the fleet's owner sees which devices are stuck and which are only slow.
    name: '003-device-update-failed',
    statements: [`ALTER TABLE "device" ADD COLUMN update_failed BOOLEAN NOT NULL DEFAULT FALSE`],
  },
  {
    // Several cloud processes (replicas) on one database: which replicas are alive (by the
    // database's clock), which one holds each device's tunnel, and proxy messages between
    // replicas too large for a PostgreSQL notification. See src/cloud/cluster/.
    name: '004-cloud-replicas',
    statements: [
      `CREATE TABLE "cloud_replica" (id TEXT PRIMARY KEY, started_at BIGINT NOT NULL, heartbeat_at BIGINT NOT NULL)`,
      `CREATE TABLE "device_tunnel" (uuid TEXT PRIMARY KEY, replica TEXT NOT NULL, since BIGINT NOT NULL)`,
      `CREATE INDEX device_tunnel_replica ON "device_tunnel" (replica)`,
      `CREATE TABLE "cloud_message" (id {pk}, replica TEXT NOT NULL, payload TEXT NOT NULL)`,
    ],
  },
  targetVersionsMigration(),
  {
    // Found by test/cloud-query-plans.test.ts: on PostgreSQL, devices by tag ($filter with
    // any()) read every tag; on both, paging devices by name sorted every device. SQLite
    // finds tagged devices through (device, tag_key) and uses no plan with the tag index,
    // but its presence makes SQLite's planner (which has no statistics) check the tag last
    // in a $count, 25% slower (bench/cloud.bench.ts, query d): PostgreSQL only.
    name: '006-query-indexes',
    statements: [`CREATE INDEX device_name_order ON "device" (device_name, id)`],
    only: { postgres: [`CREATE INDEX device_tag_key_value ON "device_tag" (tag_key, value)`] },
  },
  keysChangedMigration(),
  {
    // Devices by tag (query d of bench/cloud.bench.ts, 1,000 of 10,000 devices matching):
    // the tags' device ids, and on PostgreSQL each device's fleet for the permission check,
    // come from indexes alone, with no visit to a tag or device row. PostgreSQL: 1.5 ms
    // became 0.9 ms per $count, and the planner picks that plan itself. SQLite, which
    // reaches a row by its id directly, drives the lookup from the tags now that `any()`
    // compiles to an IN list there (src/cloud/odata/sql.ts): 2.3 ms became 0.25 ms.
    name: '008-index-only-device-paths',
    statements: [`CREATE INDEX device_tag_key_value_device ON "device_tag" (tag_key, value, device)`],
    only: {
      postgres: [`DROP INDEX device_tag_key_value`, `CREATE INDEX device_id_application ON "device" (id, belongs_to__application)`],
    },
  },
];

/**
 * 007: replicas keep principals by key (src/cloud/auth/principal-cache.ts) and must hear of
 * every change that can alter one: a key's row (revoked, expiry moved), or the user, device
 * or fleet its actor is (admin flag, a device moved to another fleet, any of them deleted).
 * PostgreSQL notifies KEYS_CHANNEL on commit, once per transaction however many statements
 * fired. New keys need no notice: an unknown key is never kept. SQLite has no listeners, and
 * its replicas keep no principals.
 */
function keysChangedMigration(): Migration {
  const watched: Array<[string, string]> = [
    ['api_key', 'UPDATE OR DELETE OR TRUNCATE'],
    ['user', 'UPDATE OF actor, is_admin OR DELETE OR TRUNCATE'],
    ['device', 'UPDATE OF actor, uuid, belongs_to__application OR DELETE OR TRUNCATE'],
    ['application', 'UPDATE OF actor OR DELETE OR TRUNCATE'],
  ];
  return {
    name: '007-keys-changed',
    statements: [],
    only: {
      postgres: [
        `CREATE FUNCTION fleetlab_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('${KEYS_CHANNEL}', ''); RETURN NULL; END $$`,
        ...watched.map(([table, events]) => `CREATE TRIGGER "${table}_keys_changed" AFTER ${events} ON "${table}" FOR EACH STATEMENT EXECUTE FUNCTION fleetlab_keys_changed()`),
      ],
    },
  };
}

/**
 * 005: a device's target state is a function of its own row and variables, its fleet's row
 * and variables, and the content of the release it runs. Each of the three rows carries a
 * `target_version` that triggers raise on every write that can change that part of the
 * target, so a replica knows in one indexed lookup whether the target it built before is
 * still the target (src/cloud/device/target-cache.ts). Triggers, not application code:
 * every write path (OData, device routes, cascades, another replica) is covered.
 */
function targetVersionsMigration(): Migration {
  // [child table, its link column, the parent (device, application or release) it changes]
  const children: Array<[string, string, string]> = [
    ['device_environment_variable', 'device', 'device'],
    ['device_config_variable', 'device', 'device'],
    ['application_environment_variable', 'application', 'application'],
    ['application_config_variable', 'application', 'application'],
    ['image__is_part_of__release', 'is_part_of__release', 'release'],
  ];
  // [table, the columns of its own row the target shows]
  const selves: Array<[string, string[]]> = [
    ['device', ['uuid', 'device_name', 'should_be_running__release', 'belongs_to__application']],
    ['application', ['app_name', 'should_be_running__release']],
    ['release', ['commit', 'composition']],
  ];
  // [table, columns, the releases a change of one row reaches]
  const reaching: Array<[string, string[], string]> = [
    ['image', ['is_stored_at__image_location', 'is_a_build_of__service'], `SELECT is_part_of__release FROM "image__is_part_of__release" WHERE image = NEW.id`],
    ['service', ['service_name'], `SELECT ir.is_part_of__release FROM "image__is_part_of__release" ir JOIN "image" i ON i.id = ir.image WHERE i.is_a_build_of__service = NEW.id`],
  ];
  const bump = (table: string, where: string) => `UPDATE "${table}" SET target_version = target_version + 1 WHERE ${where}`;
  const changed = (cols: string[], op: 'IS NOT' | 'IS DISTINCT FROM') => cols.map((c) => `OLD."${c}" ${op} NEW."${c}"`).join(' OR ');
  const colList = (cols: string[]) => cols.map((c) => `"${c}"`).join(', ');

  const sqlite: string[] = [];
  for (const [child, link, parent] of children) {
    sqlite.push(
      `CREATE TRIGGER "${child}_target_insert" AFTER INSERT ON "${child}" BEGIN ${bump(parent, `id = NEW."${link}"`)}; END`,
      `CREATE TRIGGER "${child}_target_update" AFTER UPDATE ON "${child}" BEGIN ${bump(parent, `id IN (OLD."${link}", NEW."${link}")`)}; END`,
      `CREATE TRIGGER "${child}_target_delete" AFTER DELETE ON "${child}" BEGIN ${bump(parent, `id = OLD."${link}"`)}; END`,
    );
  }
  // SQLite's recursive triggers are off, and target_version is not among the watched columns.
  for (const [table, cols] of selves) {
    sqlite.push(`CREATE TRIGGER "${table}_target_self" AFTER UPDATE OF ${colList(cols)} ON "${table}" WHEN ${changed(cols, 'IS NOT')} BEGIN ${bump(table, 'id = NEW.id')}; END`);
  }
  for (const [table, cols, releases] of reaching) {
    sqlite.push(`CREATE TRIGGER "${table}_target_releases" AFTER UPDATE OF ${colList(cols)} ON "${table}" WHEN ${changed(cols, 'IS NOT')} BEGIN ${bump('release', `id IN (${releases})`)}; END`);
  }

  const postgres: string[] = [
    // TG_ARGV: the parent table and the child's link column; an update that moves a row
    // changes both parents.
    `CREATE FUNCTION fleetlab_target_parent() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF TG_OP <> 'INSERT' THEN
         EXECUTE format('UPDATE %I SET target_version = target_version + 1 WHERE id = $1', TG_ARGV[0]) USING (to_jsonb(OLD) ->> TG_ARGV[1])::integer;
       END IF;
       IF TG_OP <> 'DELETE' THEN
         EXECUTE format('UPDATE %I SET target_version = target_version + 1 WHERE id = $1', TG_ARGV[0]) USING (to_jsonb(NEW) ->> TG_ARGV[1])::integer;
       END IF;
       RETURN NULL;
     END $$`,
    `CREATE FUNCTION fleetlab_target_self() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN NEW.target_version := OLD.target_version + 1; RETURN NEW; END $$`,
  ];
  for (const [child, link, parent] of children) {
    postgres.push(`CREATE TRIGGER "${child}_target" AFTER INSERT OR UPDATE OR DELETE ON "${child}" FOR EACH ROW EXECUTE FUNCTION fleetlab_target_parent('${parent}', '${link}')`);
  }
  for (const [table, cols] of selves) {
    postgres.push(`CREATE TRIGGER "${table}_target_self" BEFORE UPDATE OF ${colList(cols)} ON "${table}" FOR EACH ROW WHEN (${changed(cols, 'IS DISTINCT FROM')}) EXECUTE FUNCTION fleetlab_target_self()`);
  }
  for (const [table, cols, releases] of reaching) {
    postgres.push(
      `CREATE FUNCTION "fleetlab_${table}_target"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ${bump('release', `id IN (${releases})`)}; RETURN NULL; END $$`,
      `CREATE TRIGGER "${table}_target_releases" AFTER UPDATE OF ${colList(cols)} ON "${table}" FOR EACH ROW WHEN (${changed(cols, 'IS DISTINCT FROM')}) EXECUTE FUNCTION "fleetlab_${table}_target"()`,
    );
  }

  return {
    name: '005-target-versions',
    statements: ['device', 'application', 'release'].map((t) => `ALTER TABLE "${t}" ADD COLUMN target_version INTEGER NOT NULL DEFAULT 0`),
    only: { sqlite, postgres },
  };
}

/** Applies the migrations not yet recorded, each in its own transaction. Returns their names. */
export async function migrate(db: Db, list: Migration[] = migrations): Promise<string[]> {
  await db.exec(`CREATE TABLE IF NOT EXISTS fleetlab_migration (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`);
  const done = new Set((await db.query<{ name: string }>('SELECT name FROM fleetlab_migration', [])).map((r) => r.name));
  const applied: string[] = [];
  for (const m of list) {
    if (done.has(m.name)) continue;
    await db.transaction(async (tx) => {
      for (const statement of [...m.statements, ...(m.only?.[tx.dialect.name] ?? [])]) {
        const sql = tx.dialect.renderDdl(statement);
        if (sql) await tx.exec(sql);
      }
      await tx.query('INSERT INTO fleetlab_migration (name, applied_at) VALUES (?, ?)', [m.name, new Date().toISOString()]);
    });
    applied.push(m.name);
  }
  return applied;
}
