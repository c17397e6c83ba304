/**
 * A server as a child process that announces itself with one JSON line on stdout (its
 * ready line, as `fleetlab cloud` prints): that line parsed, every line after it, and a
 * stop (SIGTERM) and a kill (SIGKILL).
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

export interface ReadyProcess<T> {
  ready: T;
  lines: string[];
  pid: number;
  /** Why it is gone, if it is: its exit and the end of its stderr; else undefined. */
  gone(): string | undefined;
  /** SIGTERM, then the exit code; SIGKILL if it has not exited after `graceMs`. */
  stop(graceMs?: number): Promise<number | null>;
  /** SIGKILL: no cleanup of any kind, as a crashed host. */
  kill(): Promise<void>;
}

export interface ReadyProcessOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** What the process is called in errors. */
  label?: string;
  timeoutMs?: number;
}

/** Starts `command args`; resolves on its first stdout line, parsed as JSON. */
export async function startReadyProcess<T>(command: string, args: string[], opts: ReadyProcessOptions = {}): Promise<ReadyProcess<T>> {
  const label = opts.label ?? command;
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const child = spawn(command, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  let exit: string | undefined;
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      exit = `${label} exited (${signal ?? `code ${code}`}): ${stderr.trim().split('\n').slice(-15).join('\n')}`;
      resolve(code);
    }),
  );
  let timer: NodeJS.Timeout | undefined;
  const first = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout });
    rl.on('line', (l) => {
      lines.push(l);
      if (lines.length === 1) resolve(l);
    });
    child.once('error', (err) => reject(new Error(`${label} did not start: ${err.message}`)));
    child.once('exit', (code) => reject(new Error(`${label} exited with ${code} before its ready line: ${stderr}`)));
    timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${label}: no ready line within ${timeoutMs / 1000} s: ${stderr}`));
    }, timeoutMs);
  }).finally(() => clearTimeout(timer));
  let ready: T;
  try {
    ready = JSON.parse(first) as T;
  } catch {
    child.kill('SIGKILL');
    throw new Error(`${label}: its first line is not a JSON ready line: ${first}`);
  }
  return {
    ready,
    lines,
    pid: child.pid!,
    gone: () => exit,
    stop: async (graceMs = 10_000) => {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}
