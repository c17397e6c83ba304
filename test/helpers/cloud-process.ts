/**
 * `fleetlab cloud` as a child process, started from source: its first stdout line (the
 * ready line), every line after it, and a stop (SIGTERM) and a kill (SIGKILL).
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startReadyProcess, type ReadyProcess } from '../../support/ready-process.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

export interface CloudReady {
  event: string;
  url: string;
  adminKey: string | null;
  replica: string;
}

export type CloudProcess = ReadyProcess<CloudReady>;

/** Starts `fleetlab cloud --port 0 ...args`; resolves on its ready line. */
export function startCloudProcess(args: string[]): Promise<CloudProcess> {
  return startReadyProcess<CloudReady>(process.execPath, ['--import', 'tsx', join(root, 'cli/main.ts'), 'cloud', '--port', '0', ...args], { cwd: root, label: 'fleetlab cloud' });
}
