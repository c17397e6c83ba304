/**
 * A shell on "the device" when the device is this host: the sim target, a capture of a
 * simulated device here, and the docker CLI for an engine the harness shares.
 */
import { execFile } from 'node:child_process';
import { FleetlabError } from '../../src/errors.js';
import type { CommandProtocol, ExecResult } from '../../device-access/protocols.js';

export function runOnHost(file: string, args: readonly string[], options: { input?: string; timeoutMs?: number } = {}): Promise<ExecResult> {
  return new Promise((resolve) => {
    const child = execFile(file, [...args], { timeout: options.timeoutMs ?? 30_000, maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err && typeof (err as NodeJS.ErrnoException).code === 'number' ? ((err as unknown as { code: number }).code) : err ? 127 : 0;
      resolve({ exitCode: code, stdout, stderr: stderr || (err && !stdout ? err.message : '') });
    });
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}

export const hostShell: CommandProtocol = {
  run: (argv, options) => (argv.length ? runOnHost(argv[0]!, argv.slice(1), options) : Promise.reject(new FleetlabError('SUP_ERR_BAD_REQUEST', 'exec: empty argv'))),
};

