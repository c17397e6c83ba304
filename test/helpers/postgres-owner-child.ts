/**
 * Child of test/postgres-cluster.test.ts: starts a throwaway cluster, says its server's pid
 * and directory, and waits to be killed with -9 (so it never stops the cluster itself).
 */
import { startPostgres } from '../../support/postgres.js';

const cluster = await startPostgres();
const url = await cluster.createDatabase('left_behind');
process.stdout.write(`${JSON.stringify({ pid: cluster.postmasterPid(), url })}\n`);
setInterval(() => undefined, 60_000);
