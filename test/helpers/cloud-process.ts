/**
 * `fleetlab cloud` as a child process, started from source: its first stdout line (the
 * ready line), every line after it, and a stop (SIGTERM) and a kill (SIGKILL).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

export interface CloudReady {
  event: string;
  url: string;
  adminKey: string | null;
  replica: string;
}

export interface CloudProcess {
  ready: CloudReady;
  lines: string[];
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL: no cleanup of any kind, as a crashed host. */
  kill(): Promise<void>;
}

/** Starts `fleetlab cloud --port 0 ...args`; resolves on its ready line. */
export async function startCloudProcess(args: string[]): Promise<CloudProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'cli/main.ts'), 'cloud', '--port', '0', ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const first = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout });
    rl.on('line', (l) => {
      lines.push(l);
      if (lines.length === 1) resolve(l);
    });
    child.once('exit', (code) => reject(new Error(`fleetlab cloud exited with ${code} before its ready line: ${stderr}`)));
    setTimeout(() => reject(new Error('no ready line within 30 s')), 30_000).unref();
  });
  return {
    ready: JSON.parse(first) as CloudReady,
    lines,
    stop: async () => {
      child.kill('SIGTERM');
      return exited;
    },
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}
