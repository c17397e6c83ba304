/**
 * The edges of a lab board's health check: SSH (the board config's address and key) and the
 * supervisor's /ping over HTTP, each bounded by the step's timeout. One SSH connection serves
 * every step of a check and is closed after it.
 */
import { readFile } from 'node:fs/promises';
import { fetchFailure } from '../lib/http.js';
import { withDeadline } from '../../src/wait.js';
import { SshDevice } from '../../device-access/ssh-device.js';
import type { LabBoard } from './lab-file.js';
import { runHealthCheck, type HealthProbes, type HealthResult } from './health-check.js';

/** Runs `board`'s health check (its lab file's steps and bounds) against the board itself. */
export async function checkBoard(board: LabBoard): Promise<HealthResult> {
  const health = board.health;
  if (!health) throw new Error(`board ${board.name} has no health settings: the lab file has no "health" section`);
  const c = board.config;
  let ssh: SshDevice | undefined;
  const device = async (): Promise<SshDevice> => {
    // Read at the first SSH step: an unreadable key fails that step, not the check's caller.
    ssh ??= new SshDevice({ host: c.host, port: c.sshPort, username: c.user, privateKey: await readFile(c.privateKey), readyTimeoutMs: health.stepTimeoutMs });
    return ssh;
  };
  const probes: HealthProbes = {
    run: async (argv, timeoutMs) => (await device()).run(argv, { timeoutMs }),
    ping: async (timeoutMs) => {
      const url = `${c.apiUrl}/ping`;
      try {
        return await withDeadline(timeoutMs, async (signal) => {
          const r = await fetch(url, { signal });
          return { status: r.status, body: await r.text() };
        });
      } catch (err) {
        throw new Error(`GET ${url}: ${fetchFailure(err)}`, { cause: err });
      }
    },
    now: () => Date.now(),
  };
  try {
    return await runHealthCheck(probes, health);
  } finally {
    await ssh?.close().catch(() => undefined);
  }
}
