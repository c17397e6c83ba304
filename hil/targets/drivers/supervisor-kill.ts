/**
 * `supervisor.kill`: SIGKILL to the supervisor by the target's own means (a signal to the
 * simulated device's process, `systemctl kill` over SSH), then the wait for the OS to start it
 * again: the API goes away at once and answers again after the restart delay.
 */
import { FleetlabError } from '../../../src/errors.js';
import type { CommandProtocol, SupervisorProtocol } from '../../../device-access/protocols.js';
import { waitApiDown } from './api-down.js';

export interface SupervisorKillOptions {
  /** Sends the signal; resolves once it is sent. */
  readonly kill: () => Promise<void>;
  readonly url: string;
  /** How long the API may keep answering after the signal (the target's deadline). */
  readonly downMs: number;
  /** Resolves once the restarted supervisor answers. */
  readonly waitReady: () => Promise<void>;
}

export function supervisorKill(o: SupervisorKillOptions): SupervisorProtocol {
  return {
    kill: async () => {
      await o.kill();
      await waitApiDown(o.url, { timeoutMs: o.downMs, intervalMs: 50, after: 'SIGKILL to the supervisor' });
      await o.waitReady();
    },
  };
}

/** SIGKILL to a systemd unit's processes on a board, over its shell; systemd starts it again. */
export async function systemctlKill(shell: CommandProtocol, unit: string): Promise<void> {
  const r = await shell.run(['systemctl', 'kill', '--signal=KILL', unit]);
  if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `supervisor.kill: systemctl kill --signal=KILL ${unit} exited ${r.exitCode}: ${(r.stderr || r.stdout).trim() || '(no output)'}`);
}
