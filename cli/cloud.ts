/** `fleetlab cloud` and `fleetlab registry`: the servers devices talk to, the cloud API and a container registry. */
import { join } from 'node:path';
import type { Command } from 'commander';
import { action } from '../src/command/action.js';
import { UsageError } from '../src/command/usage-hint.js';
import { parsePort } from './options.js';

export function addCloudCommands(program: Command): void {
  program
    .command('cloud')
    .description('Run the cloud API (OData v6 over SQLite, or PostgreSQL with --database)')
    .option('--port <n>', 'port to listen on (0: pick a free one)', '8080')
    .option('--host <addr>', 'address to listen on', '127.0.0.1')
    .option('--data-dir <dir>', 'SQLite database and admin key file (default: $XDG_DATA_HOME/fleetlab/cloud or ~/.local/share/fleetlab/cloud)')
    .option('--database <url>', 'postgres://user@host:port/db (default: SQLite in the data directory)')
    .option('--admin-key <key>', 'admin API key to create or add (default: generated on first start)')
    .option('--db-pool <n>', 'PostgreSQL connections this process opens (default: 10); replicas x this must stay under the server\'s max_connections')
    .action(
      action(async (opts: { port: string; host: string; dataDir?: string; database?: string; adminKey?: string; dbPool?: string }) => {
        const port = parsePort('--port', opts.port);
        const { databaseUrlProblem, runCloud } = await import('../src/cloud/main.js');
        const problem = opts.database === undefined ? null : databaseUrlProblem(opts.database);
        if (problem) throw new UsageError(problem);
        const dbPool = opts.dbPool === undefined ? undefined : Number(opts.dbPool);
        if (dbPool !== undefined && (!Number.isInteger(dbPool) || dbPool < 1 || dbPool > 1000)) throw new UsageError(`--db-pool must be a whole number of connections, 1..1000, got ${opts.dbPool}`);
        if (dbPool !== undefined && !opts.database?.startsWith('postgres')) throw new UsageError('--db-pool sizes the PostgreSQL connection pool: it needs --database postgres://...');
        const { stopped } = await runCloud({ ...opts, port, dbPool });
        await stopped;
      }),
    );

  program
    .command('registry')
    .description("Serve a container registry on 127.0.0.1 (Debian's docker-registry) for fleetlab deploy --registry; boards reach it through SSH or your network. Ctrl-C stops it")
    .option('--port <port>', 'port to listen on (0: a free one)', '5000')
    .option('--dir <dir>', 'where it stores images (default: <cache>/registry)')
    .action(
      action(async (opts: { port: string; dir?: string }) => {
        const { startRegistry } = await import('../hil/release/registry.js');
        const { cacheRoot } = await import('../device-image/tools.js');
        const dir = opts.dir ?? join(cacheRoot(), 'registry');
        const port = parsePort('--port', opts.port);
        const registry = await startRegistry({ dir, ...(port ? { port } : {}) });
        console.log(`registry on ${registry.host} (images in ${dir}, log ${registry.logPath}); deploy to it with fleetlab deploy --registry ${registry.host}; Ctrl-C stops it`);
        const { untilStopped } = await import('../src/stop-signals.js');
        await untilStopped(() => registry.close()).done;
      }),
    );
}
