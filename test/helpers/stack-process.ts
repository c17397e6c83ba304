/**
 * `fleetlab sim stack` as a user runs it: a child process in a process group of its own (as
 * a shell gives a foreground job, so a signal to the group is a Ctrl-C), read by its ready
 * line; and the traces a run can leave on this machine, looked up from outside the stack:
 * docker objects by the device's label, processes by the run's session label (named in its
 * owner file), by command line and as descendants of the stack, mounts by path.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import type Docker from 'dockerode';

const root = fileURLToPath(new URL('../..', import.meta.url));
const READY_MS = 120_000;
const EXIT_MS = 60_000;
const APP_MS = 90_000;

export interface StackReady {
  stateDir: string;
  cloud: { url: string; adminKey: string };
  fleet: { id: number };
  device: { uuid: string };
}

/** A process named by pid and start time, so a pid reused later is not taken for it. */
export interface ProcessRef {
  pid: number;
  start: string;
}

export interface StackProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly ready: StackReady;
  /** The session label its processes carry, from the run's owner file. */
  readonly session: string;
  /** The stack's descendants while it ran (its children and theirs). */
  readonly descendants: ProcessRef[];
  /** Settles with the exit code (or signal) once the stack has exited. */
  readonly exited: Promise<number | NodeJS.Signals | null>;
  stderr(): string;
}

interface ProcInfo {
  pid: number;
  ppid: number;
  state: string;
  start: string;
}

function procInfo(pid: number): ProcInfo | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { pid, state: f[0]!, ppid: Number(f[1]), start: f[19]! };
  } catch {
    return undefined;
  }
}

const pids = () => readdirSync('/proc').filter((n) => /^\d+$/.test(n)).map(Number);

/** Live (not zombie) processes, other than this test's own. */
function liveProcesses(): ProcInfo[] {
  return pids()
    .filter((p) => p !== process.pid)
    .map(procInfo)
    .filter((p): p is ProcInfo => p !== undefined && p.state !== 'Z' && p.state !== 'X');
}

const readProc = (pid: number, file: string) => {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'latin1');
  } catch {
    return '';
  }
};

export const commandLine = (pid: number) => readProc(pid, 'cmdline').split('\0').join(' ').trim();

export function descendantsOf(pid: number): ProcessRef[] {
  const all = liveProcesses();
  const found: ProcessRef[] = [];
  const parents = new Set([pid]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of all) {
      if (parents.has(p.ppid) && !parents.has(p.pid)) {
        parents.add(p.pid);
        found.push({ pid: p.pid, start: p.start });
        grew = true;
      }
    }
  }
  return found;
}

/** Starts `fleetlab sim stack` with its state under `stateDir` and waits (bounded) for its ready line. */
export async function startStackProcess(stateDir: string): Promise<StackProcess> {
  // cli/main.ts through tsx is what bin/fleetlab.js runs once compiled: the test runs the
  // sources it checks, with no build step that could leave dist/ behind them.
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(root, 'cli/main.ts'), 'sim', 'stack', '--port', '0', '--cloud-port', '0', '--poll-interval-ms', '1000', '--state-dir', stateDir],
    { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  let stderr = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (text: string) => {
    stderr += text;
  });
  const exited = new Promise<number | NodeJS.Signals | null>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
  const line = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ready line within ${READY_MS / 1000} s; stderr:\n${stderr}`)), READY_MS);
    createInterface({ input: child.stdout! }).on('line', (l) => {
      if (!l.startsWith('{')) return;
      clearTimeout(timer);
      resolve(l);
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the stack exited (${code}) before its ready line; stderr:\n${stderr}`));
    });
  });
  const ready = JSON.parse(line) as StackReady;
  const owner = JSON.parse(readFileSync(join(ready.stateDir, 'owner.json'), 'utf8')) as { owner: number; session: string };
  if (owner.owner !== child.pid) throw new Error(`the run's owner file names ${owner.owner}, not the stack ${child.pid}`);
  return { child, pid: child.pid!, ready, session: owner.session, descendants: descendantsOf(child.pid!), exited, stderr: () => stderr };
}

/** Waits (bounded) for the stack to exit; returns its exit code or signal. */
export async function waitExit(stack: StackProcess): Promise<number | NodeJS.Signals | null> {
  const timeout = sleep(EXIT_MS).then(() => 'still running' as const);
  const result = await Promise.race([stack.exited, timeout]);
  if (result === 'still running') throw new Error(`the stack did not exit within ${EXIT_MS / 1000} s; stderr:\n${stack.stderr()}`);
  return result;
}

/** Waits (bounded) until the stack has written `text` on stderr. */
export async function waitForStderr(stack: StackProcess, text: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!stack.stderr().includes(text)) {
    if (Date.now() > deadline) throw new Error(`the stack did not print "${text}" within ${ms / 1000} s; stderr:\n${stack.stderr()}`);
    await sleep(50);
  }
}

async function cloudCall(ready: StackReady, method: string, path: string, body: unknown): Promise<void> {
  const res = await fetch(`${ready.cloud.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ready.cloud.adminKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`cloud ${method} ${path}: ${res.status} ${await res.text()}`);
}

/**
 * Deploys a release of fleetlab/test-app:1 with a named volume to the stack's fleet (the calls
 * the stack prints), and waits (bounded) until its container runs: a container, a network
 * and a volume of the device on dockerd.
 */
export async function deployApp(ready: StackReady, docker: Docker): Promise<void> {
  const fleet = ready.fleet.id;
  await cloudCall(ready, 'POST', '/v6/service', { application: fleet, service_name: 'main' });
  await cloudCall(ready, 'POST', '/v6/image', { is_a_build_of__service: 1, is_stored_at__image_location: 'fleetlab/test-app:1', status: 'success' });
  await cloudCall(ready, 'POST', '/v6/release', {
    belongs_to__application: fleet,
    commit: 'c1',
    status: 'success',
    composition: { services: { main: { volumes: ['data:/data'] } }, volumes: { data: {} } },
  });
  await cloudCall(ready, 'POST', '/v6/release_image', { image: 1, is_part_of__release: 1 });
  await cloudCall(ready, 'PATCH', `/v6/application(${fleet})`, { should_be_running__release: 1 });
  // The app's: the device's host-network container carries the device label too, but no app id.
  const filters = { label: [`io.fleetlab.device=${ready.device.uuid}`, 'io.fleetlab.app-id'], status: ['running'] };
  const deadline = Date.now() + APP_MS;
  while (Date.now() < deadline) {
    if ((await docker.listContainers({ filters })).length > 0) return;
    await sleep(250);
  }
  throw new Error(`the app's container did not run within ${APP_MS / 1000} s`);
}

export interface Traces {
  containers: string[];
  networks: string[];
  volumes: string[];
  /** `pid command line` of each process of the run. */
  processes: string[];
  /** Mount points under the run's directory, in any process's mount namespace. */
  mounts: string[];
  /** Whether the run's directory is still there. */
  runDir: boolean;
}

/** What `tracesOf` needs to know of a run: its process, its session label and its device's directory and uuid. */
export type TracedRun = Pick<StackProcess, 'pid' | 'session' | 'descendants'> & { readonly ready: { readonly stateDir: string; readonly device: { readonly uuid: string } } };

/** Everything of the run of `stack` still on this machine, looked up from outside it. */
export async function tracesOf(stack: TracedRun, docker: Docker): Promise<Traces> {
  const filters = { label: [`io.fleetlab.device=${stack.ready.device.uuid}`] };
  const containers = (await docker.listContainers({ all: true, filters })).map((c) => c.Names.join(','));
  const networks = (await docker.listNetworks({ filters })).map((n) => n.Name);
  const volumes = ((await docker.listVolumes({ filters })).Volumes ?? []).map((v) => v.Name);
  const label = `FLEETLAB_SESSION=${stack.session}`;
  const live = liveProcesses();
  const ours = new Set<number>();
  for (const p of live) {
    if (readProc(p.pid, 'environ').split('\0').includes(label)) ours.add(p.pid);
    if (commandLine(p.pid).includes(stack.ready.stateDir)) ours.add(p.pid);
    if (p.pid === stack.pid || stack.descendants.some((d) => d.pid === p.pid && d.start === p.start)) ours.add(p.pid);
  }
  const mounts = new Set<string>();
  for (const p of live) {
    for (const line of readProc(p.pid, 'mountinfo').split('\n')) {
      const mountPoint = line.split(' ')[4];
      if (mountPoint?.startsWith(`${stack.ready.stateDir}/`)) mounts.add(mountPoint);
    }
  }
  return {
    containers,
    networks,
    volumes,
    processes: [...ours].map((pid) => `${pid} ${commandLine(pid)}`),
    mounts: [...mounts],
    runDir: existsSync(stack.ready.stateDir),
  };
}

export const NO_TRACES: Traces = { containers: [], networks: [], volumes: [], processes: [], mounts: [], runDir: false };
