/**
 * `engine.restart` on a board: `systemctl restart docker` over its shell, as an engine upgrade
 * or crash and restart does, then the wait for the engine to answer its CLI again.
 */
import { FleetlabError } from '../../../src/errors.js';
import { until } from '../../../src/wait.js';
import type { CommandProtocol, EngineProtocol } from '../../../device-access/protocols.js';

export function systemdEngine(shell: CommandProtocol, o: { unit: string; readyMs: number }): EngineProtocol {
  return {
    restart: async () => {
      const r = await shell.run(['systemctl', 'restart', o.unit], { timeoutMs: o.readyMs });
      if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `engine.restart: systemctl restart ${o.unit} exited ${r.exitCode}: ${(r.stderr || r.stdout).trim() || '(no output)'}`);
      await until(`${o.unit} answering after its restart`, () => shell.run(['docker', 'version', '--format', '{{.Server.Version}}']), (v) => v.exitCode === 0, { timeoutMs: o.readyMs, intervalMs: 500 });
    },
  };
}
