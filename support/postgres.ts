/**
 * A throwaway PostgreSQL cluster for tests and benches: initdb in a temp directory, a
 * server on 127.0.0.1 at a free port (and its socket in that directory), stopped and
 * removed by `stop()`. As root the server runs as the unprivileged `postgres` user, since
 * PostgreSQL refuses to run as root. Missing binaries: a clear error naming the package.
 *
 * pg_ctl leaves the server detached, so a test or bench killed with -9 (or by its timeout)
 * cannot stop it: each cluster's directory names its owner, and the next start stops the
 * servers whose owner is gone and removes their directories.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { chmod, chown, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { ownerRecord, reapStale, writeOwner } from '../src/owned-dirs.js';
import { processStart } from '../src/processes.js';

const run = promisify(execFile);

export interface PostgresCluster {
  /** Connection URL of a fresh database in this cluster. */
  createDatabase(name: string): Promise<string>;
  /** The server's main process (postmaster), whose children serve the connections. */
  postmasterPid(): number;
  stop(): Promise<void>;
}

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))) : [];
  const best = versions.sort((a, b) => Number(b) - Number(a))[0];
  if (!best) {
    throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: install the Debian package `postgresql` (scripts/provision does)');
  }
  return join(root, best, 'bin');
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function uidOf(user: string): Promise<{ uid: number; gid: number }> {
  const { stdout } = await run('id', ['-u', user]);
  const { stdout: g } = await run('id', ['-g', user]);
  return { uid: Number(stdout.trim()), gid: Number(g.trim()) };
}

export interface PostgresOptions {
  /** Server settings (`-c name=value`), e.g. `shared_preload_libraries: 'pg_stat_statements'` for a profile. */
  readonly settings?: Readonly<Record<string, string>>;
}

const DIR_PREFIX = 'fleetlab-pg-';

/** Runs a PostgreSQL program, as the `postgres` user when this process is root. */
function pgCommand(bin: string, asRoot: boolean): (cmd: string, args: string[]) => Promise<unknown> {
  return (cmd, args) => (asRoot ? run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args]) : run(join(bin, cmd), args));
}

export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresCluster> {
  const bin = binDir();
  const asRoot = process.getuid?.() === 0;
  const pgRun = pgCommand(bin, asRoot);
  // A killed owner's server, by its pid or, killed before the pid was written, by its data directory.
  await reapStale(tmpdir(), DIR_PREFIX, (_owner, dir) => pgRun('pg_ctl', ['-D', join(dir, 'data'), '-m', 'immediate', '-w', 'stop']).then(() => undefined, () => undefined));
  const dir = await mkdtemp(join(tmpdir(), DIR_PREFIX));
  const data = join(dir, 'data');
  const owner = asRoot ? await uidOf('postgres') : null;
  if (owner) {
    await chown(dir, owner.uid, owner.gid);
    await chmod(dir, 0o700);
  }
  const port = await freePort();
  let started = false;
  const stop = async () => {
    if (started) await pgRun('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
    started = false;
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await pgRun('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-sync']);
    const extra = Object.entries(options.settings ?? {}).map(([name, value]) => {
      if (!/^[a-z_.]+$/.test(name) || !/^[\w.,-]+$/.test(value)) throw new Error(`bad PostgreSQL setting ${name}=${value}`);
      return ` -c ${name}=${value}`;
    });
    const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off${extra.join('')}`;
    writeOwner(dir, ownerRecord());
    await pgRun('pg_ctl', ['-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', '-t', '60', 'start']);
    started = true;
    const postmaster = postmasterPidOf(data);
    const pidStart = processStart(postmaster);
    writeOwner(dir, ownerRecord({ pid: postmaster, ...(pidStart ? { pidStart } : {}) }));
  } catch (err) {
    await stop();
    throw err;
  }
  const base = `postgres://postgres@127.0.0.1:${port}`;
  return {
    async createDatabase(name) {
      if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`bad database name ${name}`);
      const client = new pg.Client({ connectionString: `${base}/postgres` });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE ${name}`);
      } finally {
        await client.end();
      }
      return `${base}/${name}`;
    },
    postmasterPid: () => postmasterPidOf(data),
    stop,
  };
}

function postmasterPidOf(data: string): number {
  return Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
}
