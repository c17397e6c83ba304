/**
 * The real supervisor as a process of its own, over real peers (a private dbus-daemon with
 * the simulated hostname1/systemd1/login1, a journal written by journal-remote, and either
 * the real dockerd or a simulated engine served from this process), so a test can `kill -9`
 * it at any instant and start it again on the same data, as a board's init would.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readFileSync, statSync, watch, type FSWatcher, type WriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { startHostPeer, type HostPeer } from '../../sim/dbus/host-peer.js';
import { startPrivateBus, type PrivateBus } from '../../sim/dbus/private-bus.js';
import { startSimEngine, type Scenario, type SimEngineHandle } from '../../sim/engine/index.js';
import { cliCommand } from '../../sim/entry.js';
import { startJournalSim, type JournalSim } from '../../sim/journal/journal-sim.js';
import { sharedEngineNetwork, sharedEngineNetworkArgs } from '../../sim/supervisor-network.js';
import { stoppedWithParent } from '../../src/processes.js';
import { freePort } from '../../src/free-port.js';
import { newKey } from '../../src/supervisor/state/keys.js';
import { Teardown } from '../../src/teardown.js';
import { removeDeviceLeftovers } from '../../sim/device-leftovers.js';
import { dockerSocket } from './supervisor-fixture.js';

export interface SupervisorProcess {
  readonly url: string;
  readonly key: string;
  readonly dir: string;
  readonly lockRoot: string;
  readonly logPath: string;
  readonly docker: Docker;
  readonly simEngine: SimEngineHandle | undefined;
  uuid(): string;
  /** Bytes in the supervisor's log so far: a mark to search the log after. */
  logSize(): number;
  /** Resolves after `n` more atomic writes of the device store land (or at `timeoutMs`). */
  storeWrites(n: number, timeoutMs: number): Promise<void>;
  /** SIGKILL, then waits for the process to be gone. */
  kill9(): Promise<void>;
  /** Starts it again on the same data and waits until /ping answers. */
  restart(): Promise<void>;
  close(): Promise<void>;
}

const READY_MS = 30_000;

export async function startSupervisorProcess(o: { engine: 'dockerd' | 'sim'; scenario?: Scenario; bandwidth?: number }): Promise<SupervisorProcess> {
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-supproc-'));
  // Undone last-started first, each step even when one before it failed (and on a failed start).
  const teardown = new Teardown();
  teardown.defer({ name: 'the test directory', stop: () => rm(dir, { recursive: true, force: true }) });
  try {
    return await start(dir, teardown, o);
  } catch (err) {
    await teardown.stop().catch(() => undefined);
    throw err;
  }
}

async function start(dir: string, teardown: Teardown, o: { engine: 'dockerd' | 'sim'; scenario?: Scenario; bandwidth?: number }): Promise<SupervisorProcess> {
  const port = await freePort();
  const key = newKey();
  const dataDir = join(dir, 'supervisor');
  const lockRoot = join(dir, 'locks');
  const logPath = join(dir, 'supervisor.log');
  mkdirSync(dataDir, { recursive: true });
  const bus: PrivateBus = await startPrivateBus({ dir: join(dir, 'dbus') });
  teardown.defer({ name: 'the D-Bus daemon', stop: () => bus.stop() });
  const peer: HostPeer = await startHostPeer({ busAddress: bus.address, stateDir: join(dir, 'host'), defaultHostname: 'fleetlab' });
  teardown.defer({ name: 'the host peer', stop: () => peer.close() });
  mkdirSync(join(dir, 'journal'), { recursive: true });
  const journal: JournalSim = await startJournalSim({ directory: join(dir, 'journal') });
  teardown.defer({ name: 'the journal peer', stop: () => journal.close() });
  const simEngine = o.engine === 'sim'
    ? await startSimEngine({ socketPath: join(dir, 'engine.sock'), dataDir: join(dir, 'engine'), ...(o.scenario ? { scenario: o.scenario } : {}), ...(o.bandwidth ? { bandwidth: o.bandwidth } : {}) })
    : undefined;
  if (simEngine) teardown.defer({ name: 'the simulated engine', stop: () => simEngine.close() });
  const engineSocket = simEngine?.socketPath ?? dockerSocket;
  const docker = new Docker({ socketPath: engineSocket });
  const log: WriteStream = createWriteStream(logPath, { flags: 'a' });
  teardown.defer({ name: 'the supervisor log', stop: () => new Promise<void>((r) => log.end(r)) });
  const url = `http://127.0.0.1:${port}`;
  const cli = cliCommand([
    'supervisor', '--port', String(port), '--listen-address', '127.0.0.1', '--data-dir', dataDir,
    '--local-mode', 'true', '--api-key', key, '--docker-socket', engineSocket,
    ...(simEngine ? [] : sharedEngineNetworkArgs(sharedEngineNetwork())),
    '--dbus-address', bus.address, '--proxy-config-dir', join(dir, 'boot', 'system-proxy'),
    '--boot-config-path', join(dir, 'boot', 'config.txt'), '--journal-directory', journal.directory, '--lock-root', lockRoot,
  ]);
  let child: ChildProcess | null = null;

  const exited = (c: ChildProcess) => (c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => c.once('exit', () => r())));

  async function boot(): Promise<void> {
    // Ends with the test process, even when a killed run never reaches close().
    const c = spawn(...stoppedWithParent(cli.file, cli.args), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FORCE_COLOR: '0' } });
    child = c;
    c.stdout!.pipe(log, { end: false });
    c.stderr!.pipe(log, { end: false });
    const deadline = Date.now() + READY_MS;
    for (;;) {
      if (c.exitCode !== null) throw new Error(`the supervisor exited at start (${c.exitCode}); its log ${logPath} ends:\n${readFileSync(logPath, 'utf8').slice(-2000)}`);
      if (await fetch(`${url}/ping`).then((r) => r.ok, () => false)) return;
      if (Date.now() > deadline) throw new Error(`the supervisor did not answer /ping within ${READY_MS} ms; see ${logPath}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async function kill9(): Promise<void> {
    const c = child;
    child = null;
    if (!c) return;
    c.kill('SIGKILL');
    await exited(c);
  }

  const stopSupervisor = async () => {
    const c = child;
    child = null;
    if (!c) return;
    c.kill('SIGTERM');
    const timer = setTimeout(() => c.kill('SIGKILL'), 10_000);
    await exited(c);
    clearTimeout(timer);
  };
  const uuid = () => (JSON.parse(readFileSync(join(dataDir, 'device.json'), 'utf8')) as { uuid: string }).uuid;
  teardown.defer({
    name: "the device's containers, networks and volumes",
    stop: async () => {
      if (existsSync(join(dataDir, 'device.json'))) await removeDeviceLeftovers(docker, uuid());
    },
  });
  teardown.defer({ name: 'the supervisor', stop: stopSupervisor, kill: () => child?.kill('SIGKILL') });
  await boot();

  return {
    url, key, dir, lockRoot, logPath, docker, simEngine, uuid,
    logSize: () => statSync(logPath).size,
    storeWrites(n, timeoutMs) {
      // The store's atomic write ends in a rename onto device.json: one event per durable write.
      return new Promise<void>((resolve) => {
        let seen = 0;
        let watcher: FSWatcher | undefined;
        const done = () => {
          clearTimeout(timer);
          watcher?.close();
          resolve();
        };
        const timer = setTimeout(done, timeoutMs);
        watcher = watch(dataDir, (event, name) => {
          if (event === 'rename' && name === 'device.json' && ++seen >= n) done();
        });
      });
    },
    kill9,
    restart: async () => {
      await kill9();
      await boot();
    },
    close: () => teardown.stop(),
  };
}
