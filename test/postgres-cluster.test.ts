/**
 * The throwaway PostgreSQL of tests and benches (support/postgres.ts): pg_ctl detaches the
 * server, so an owner killed with -9 leaves it running; the next start stops it and removes
 * its directory.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { startPostgres } from '../support/postgres.js';
import { alive } from '../src/processes.js';

const child = fileURLToPath(new URL('./helpers/postgres-owner-child.ts', import.meta.url));
const repoRoot = fileURLToPath(new URL('..', import.meta.url));

/** The cluster directory whose server is `pid` (other test files may start clusters meanwhile). */
function clusterDirOf(pid: number): string[] {
  return readdirSync(tmpdir())
    .filter((n) => n.startsWith('fleetlab-pg-'))
    .map((n) => join(tmpdir(), n))
    .filter((dir) => {
      try {
        return Number(readFileSync(join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]) === pid;
      } catch {
        return false;
      }
    });
}

describe('a throwaway PostgreSQL cluster', () => {
  it('whose owner was killed with -9 is stopped and removed by the next start', { timeout: 90_000 }, async () => {
    const owner = spawn(process.execPath, ['--import', 'tsx', child], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => owner.once('exit', resolve));
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: owner.stdout! }).once('line', resolve);
      owner.once('exit', (code) => reject(new Error(`the owner exited (${code}) before its cluster was up`)));
    });
    const left = JSON.parse(line) as { pid: number };
    const leftDirs = clusterDirOf(left.pid);
    expect(leftDirs).toHaveLength(1);
    owner.kill('SIGKILL');
    await exited;
    // What a killed run leaves: the server, still running, and its directory.
    expect(alive(left.pid)).toBe(true);

    const next = await startPostgres();
    try {
      expect(alive(left.pid)).toBe(false);
      expect(existsSync(leftDirs[0]!)).toBe(false);
    } finally {
      await next.stop();
    }
  });
});
