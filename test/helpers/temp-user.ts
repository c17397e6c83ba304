/**
 * A temporary user in the docker group, as a CI runner's user is (GitHub Actions runs jobs as
 * `runner`, in `docker`, not root): made with useradd, its commands run with runuser in a clean
 * environment (nothing of root's npm or TMPDIR leaks in), and removed with its files afterwards.
 * Making one needs root; `cannotMakeUsers` says why not where it cannot.
 */
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { lstatSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

/** The user's temporary directory: its environment has no TMPDIR. */
const SHARED_TMP = '/tmp';

/** How this machine reaches the network (proxies, its CA bundle): the machine's, so every user's. */
const MACHINE_VARIABLES = ['http_proxy', 'https_proxy', 'no_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'NODE_EXTRA_CA_CERTS'];

function machineEnv(): Record<string, string> {
  return Object.fromEntries(MACHINE_VARIABLES.flatMap((k) => (process.env[k] ? [[k, process.env[k]!]] : [])));
}

function userProcesses(uid: number): number[] {
  try {
    return execFileSync('ps', ['-o', 'pid=', '-u', String(uid)], { encoding: 'utf8' }).split('\n').map(Number).filter((p) => p > 0);
  } catch {
    return []; // ps exits 1 when there are none
  }
}

export interface UserRun {
  code: number;
  out: string;
}

export interface TempUser {
  readonly name: string;
  readonly uid: number;
  readonly home: string;
  /** Runs `file args` as the user in `cwd`, stdout and stderr together, never rejecting on exit code. */
  run(file: string, args: readonly string[], cwd: string, options?: { timeoutMs?: number; env?: Record<string, string> }): Promise<UserRun>;
  /** Stops what it left running, removes it, its home and its temporary directory. */
  remove(): void;
}

/** Why this process cannot make a user in the docker group, or undefined when it can. */
export function cannotMakeUsers(): string | undefined {
  if (process.getuid?.() !== 0) return `runs as uid ${process.getuid?.()}, and making a user (useradd) needs root`;
  try {
    execFileSync('getent', ['group', 'docker']);
  } catch {
    return 'this machine has no docker group (scripts/provision installs docker.io)';
  }
  return undefined;
}

export function makeDockerUser(prefix: string): TempUser {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`;
  execFileSync('useradd', ['--create-home', '--shell', '/bin/sh', '--groups', 'docker', name]);
  const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
  const home = execFileSync('getent', ['passwd', name], { encoding: 'utf8' }).split(':')[5]!;
  const path = process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin';
  return {
    name,
    uid,
    home,
    run: (file, args, cwd, options = {}) =>
      new Promise((done) => {
        const env = Object.entries({ HOME: home, USER: name, LOGNAME: name, PATH: path, LANG: 'C.UTF-8', ...machineEnv(), ...options.env }).map(([k, v]) => `${k}=${v}`);
        execFile('runuser', ['-u', name, '--', 'env', '-i', ...env, file, ...args], { cwd, timeout: options.timeoutMs ?? 600_000, maxBuffer: 256 * 1024 * 1024 }, (err, stdout, stderr) => {
          const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
          done({ code, out: `${stdout}${stderr}` });
        });
      }),
    remove: () => {
      // Only this user's processes, each by its id: what a run of its own left behind.
      for (const pid of userProcesses(uid)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone meanwhile
        }
      }
      execFileSync('userdel', ['--force', '--remove', name], { stdio: 'ignore' });
      // What it made in the shared temporary directory: its own (fleetlab-<uid>), tsx's cache.
      for (const entry of readdirSync(SHARED_TMP)) {
        const path = join(SHARED_TMP, entry);
        if (lstatSync(path, { throwIfNoEntry: false })?.uid === uid) rmSync(path, { recursive: true, force: true });
      }
    },
  };
}
