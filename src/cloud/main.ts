/**
 * `fleetlab cloud`: opens the database (SQLite in the data directory by default, or
 * PostgreSQL with --database postgres://...), brings it up to date, listens, and prints
 * one JSON line `{"event":"ready","url":...,"adminKey":...}` on stdout; hints go to stderr.
 *
 * The admin key is stored hashed, so the database alone cannot give it back. On first
 * creation it is also written to `<data-dir>/admin-key` (mode 0600), and later starts print
 * that file's key, so a script can always read the ready line. --admin-key adds the given
 * key to the admin (and records it in the same file).
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { writeFileAtomicSync } from '../atomic-file.js';
import { prepareDatabase } from './bootstrap.js';
import { startPostgresBus, type ReplicaBus } from './cluster/postgres-bus.js';
import { openDatabase } from './db/open.js';
import { buildCloud } from './server.js';
import { hideUrlPassword } from '../hide-url-password.js';

export { databaseUrlProblem } from './db/open.js';

export interface CloudOptions {
  port: number;
  host: string;
  dataDir?: string;
  database?: string;
  adminKey?: string;
  /** PostgreSQL connections of this process (default: DEFAULT_POOL_SIZE). */
  dbPool?: number;
}

/** `$XDG_DATA_HOME/fleetlab/cloud`, else `~/.local/share/fleetlab/cloud`. */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_DATA_HOME || join(homedir(), '.local', 'share'), 'fleetlab', 'cloud');
}

export async function runCloud(opts: CloudOptions): Promise<{ url: string; stopped: Promise<void> }> {
  const dataDir = opts.dataDir ?? defaultDataDir();
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const db = openDatabase(opts.database ?? `sqlite:${join(dataDir, 'cloud.db')}`, opts.dbPool);
  const keyFile = join(dataDir, 'admin-key');
  const admin = await prepareDatabase(db, { adminKey: opts.adminKey });
  if (admin.key) writeFileAtomicSync(keyFile, `${admin.key}\n`, 0o600);
  let adminKey = admin.key;
  if (!adminKey) {
    try {
      adminKey = readFileSync(keyFile, 'utf8').trim();
    } catch {
      console.error(`fleetlab cloud: the admin key was created earlier and ${keyFile} is gone; start with --admin-key KEY to add a new one`);
    }
  }
  // On PostgreSQL any number of cloud processes may share the database (replicas behind one
  // load balancer); they reach each other's device tunnels through LISTEN/NOTIFY.
  const replicaId = randomBytes(16).toString('hex');
  const log = { warn: (m: string) => console.error(`fleetlab cloud: ${m}`) };
  let replicaBus: ReplicaBus | null = null;
  if (db.dialect.name === 'postgres') {
    replicaBus = await startPostgresBus({ connectionString: opts.database!, db, replica: replicaId, log });
  }
  const app = buildCloud({ db, replicaId, replicaBus, log });
  // Signal handlers go in before the ready line: a supervisor that reads the line and
  // stops us at once must find them installed, not the default (die) disposition.
  let stop: () => void = () => undefined;
  const stopped = new Promise<void>((resolve) => {
    stop = () => {
      void app
        .close()
        .then(() => db.close())
        .finally(resolve);
    };
  });
  process.once('SIGINT', () => stop());
  process.once('SIGTERM', () => stop());
  const address = await app.listen({ port: opts.port, host: opts.host });
  const url = address.replace('[::1]', 'localhost');
  console.error(`fleetlab cloud: ${url} (data: ${dataDir}, database: ${opts.database ? hideUrlPassword(opts.database) : 'sqlite'})`);
  console.log(JSON.stringify({ event: 'ready', url, adminKey, replica: replicaId }));
  return { url, stopped };
}
