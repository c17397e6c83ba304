/**
 * The simulated Docker Engine: `startSimEngine()` serves the Engine API on a unix socket, with
 * a simulated registry, fault injection and state kept in `dataDir`, so a simulated device
 * runs with no dockerd. See sim/README.md ("Simulated engine") for the model and its limits.
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { Agent, createServer, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { inspect } from 'node:util';
import { dirname, resolve } from 'node:path';
import { FleetlabError, errorText } from '../../src/errors.js';
import { createControl, type ControlTarget } from './control.js';
import { SimEngine } from './engine.js';
import type { EngineHistory } from './model.js';
import { createHandler, createUpgradeHandler } from './http-server.js';
import { Link } from './pull.js';
import { SimRegistry, type CatalogueEntry } from './registry.js';
import { RegistryClient } from './registry-client.js';
import { streamPair } from './stream-pair.js';
import { FaultSet, loadScenarioFile, type ContainerFaultSpec, type PullFaultSpec, type Scenario } from './scenario.js';

/** About a slow field uplink: the test images (≈2 MB) take about 2 s. */
export const DEFAULT_BANDWIDTH = 1_000_000;

export interface SimEngineOptions {
  /**
   * The unix socket to serve on. Without one the engine serves only this process, through
   * `agent()` (fleet simulation: thousands of engines, no socket or descriptor each).
   */
  socketPath?: string;
  dataDir: string;
  /** The registry catalogue; default: fleetlab's test images and busybox:latest. */
  registry?: readonly CatalogueEntry[];
  /** Registry bandwidth in bytes/s. */
  bandwidth?: number;
  /** A scenario object or the path of a scenario file. */
  scenario?: Scenario | string;
  /**
   * How far this engine's wall clock is off the host's, in ms (a device with a wrong clock:
   * its containers' times, logs and events carry it). Default 0.
   */
  clockOffsetMs?: number;
  /** Events and log lines kept in memory; default dockerd's (DEFAULT_HISTORY). */
  history?: EngineHistory;
}

export interface SimEngineHandle extends ControlTarget, AsyncDisposable {
  /** Empty when the engine serves only in-process. */
  readonly socketPath: string;
  readonly dataDir: string;
  /** The current engine (a restart replaces it with one loaded from disk). */
  readonly engine: SimEngine;
  /**
   * An HTTP agent whose connections reach this engine in-process (give it to the engine
   * adapter with any socket path): the same requests and answers as over the socket. While
   * the engine is down (a restart), connections are refused as on a socket nobody serves.
   */
  agent(): Agent;
  addPullFault(f: PullFaultSpec): void;
  addContainerFault(f: ContainerFaultSpec): void;
  /** Resolves when a scheduled or requested restart has finished. */
  restarted(): Promise<void>;
  close(): Promise<void>;
}

function listen(server: Server, socketPath: string): Promise<void> {
  if (existsSync(socketPath)) rmSync(socketPath, { force: true });
  return new Promise((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolveListen();
    });
  });
}

export async function startSimEngine(options: SimEngineOptions): Promise<SimEngineHandle> {
  const socketPath = options.socketPath === undefined ? '' : resolve(options.socketPath);
  const dataDir = resolve(options.dataDir);
  // sun_path holds 108 bytes with its terminating NUL.
  if (socketPath && Buffer.byteLength(socketPath) > 107) throw new FleetlabError('SUP_ERR_ENGINE', `simulated engine: socket path too long for a unix socket (${Buffer.byteLength(socketPath)} > 107 bytes): ${socketPath}`);
  mkdirSync(dataDir, { recursive: true });
  if (socketPath) mkdirSync(dirname(socketPath), { recursive: true });
  const scenario = typeof options.scenario === 'string' ? loadScenarioFile(options.scenario) : options.scenario;
  const faults = new FaultSet();
  const registry = new SimRegistry(options.registry);
  const registryClient = new RegistryClient();
  const link = new Link(options.bandwidth ?? scenario?.bandwidth ?? DEFAULT_BANDWIDTH);
  const offset = options.clockOffsetMs ?? 0;
  const clock = offset === 0 ? Date.now : () => Date.now() + offset;
  let engine = new SimEngine(dataDir, faults, clock, options.history);
  let restarting: Promise<void> = Promise.resolve();
  let closed = false;
  const timers: NodeJS.Timeout[] = [];
  const sockets = new Set<Duplex>();
  let serving = false;

  const handle: SimEngineHandle = {
    socketPath,
    dataDir,
    get engine() {
      return engine;
    },
    state: () => ({ socketPath, dataDir, bandwidth: link.bytesPerSecond, faults: faults.describe(), registry: registry.refs() }),
    applyScenario(s) {
      faults.apply(s);
      if (s.bandwidth) link.bytesPerSecond = s.bandwidth;
      for (const r of s.engineRestarts ?? []) {
        const t = setTimeout(() => void handle.restartEngine(r.downMs !== undefined ? { downMs: r.downMs } : {}).catch(() => undefined), r.afterMs);
        t.unref();
        timers.push(t);
      }
    },
    agent: () => inProcessAgent,
    addPullFault: (f) => faults.addPull(f),
    addContainerFault: (f) => faults.addContainer(f),
    clearFaults: () => faults.clear(),
    setDiskFull: (full) => {
      faults.diskFull = full;
    },
    setBandwidth: (bps) => {
      link.bytesPerSecond = bps;
    },
    restartEngine(opts) {
      restarting = restarting.then(async () => {
        if (closed) return;
        await stopServing();
        await engine.shutdown();
        // The fault's duration (the engine is down this long), not a wait for anything.
        await new Promise((r) => setTimeout(r, opts.downMs ?? 500));
        if (closed) return;
        engine = new SimEngine(dataDir, faults, clock, options.history);
        engine.boot();
        await startServing();
      });
      return restarting;
    },
    restarted: () => restarting,
    async close() {
      if (closed) return;
      closed = true;
      for (const t of timers) clearTimeout(t);
      await restarting.catch(() => undefined);
      await stopServing();
      link.close();
      await engine.shutdown();
      if (socketPath) rmSync(socketPath, { force: true });
    },
    [Symbol.asyncDispose]() {
      return handle.close();
    },
  };

  const httpDeps = { engine: () => engine, registry, registryClient, faults, link, control: createControl(() => handle) };
  const server = createServer(createHandler(httpDeps));
  server.on('upgrade', createUpgradeHandler(httpDeps));
  server.keepAliveTimeout = 0;
  server.on('connection', (s: Duplex) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  // keepAlive off: an idle in-process connection would hold memory for nothing.
  const inProcessAgent = new Agent({ keepAlive: false });
  // docker-modem formats every request's options with util.inspect (showHidden, no depth
  // limit) before checking whether debug output is on: walking an Agent costs milliseconds a
  // request, which a fleet of engines in one process cannot afford.
  Object.defineProperty(inProcessAgent, inspect.custom, { value: () => 'Agent { in-process simulated engine }' });
  // Node's Agent takes a returned stream at once, or waits for the callback when none is returned.
  inProcessAgent.createConnection = (_opts, callback) => {
    if (!serving) {
      const refused = Object.assign(new Error(`connect ECONNREFUSED ${socketPath || 'in-process engine'}`), { code: 'ECONNREFUSED' });
      process.nextTick(() => callback?.(refused, undefined as never));
      return undefined;
    }
    const [client, served] = streamPair();
    server.emit('connection', served);
    return client as never;
  };
  async function startServing(): Promise<void> {
    if (socketPath) await listen(server, socketPath);
    serving = true;
  }
  async function stopServing(): Promise<void> {
    if (!serving) return;
    serving = false;
    const done = server.listening ? new Promise<void>((r) => server.close(() => r())) : Promise.resolve();
    // Connections drop, as when dockerd goes away: streams (logs, events, pulls) end.
    for (const s of sockets) s.destroy();
    await done;
  }

  try {
    await startServing();
  } catch (err) {
    throw new FleetlabError('SUP_ERR_ENGINE', `simulated engine: cannot listen on ${socketPath}: ${errorText(err)}`);
  }
  engine.boot();
  if (scenario) handle.applyScenario(scenario);
  return handle;
}

export { SimEngine } from './engine.js';
export { validateScenario, loadScenarioFile, type Scenario } from './scenario.js';
export { defaultCatalogue, type CatalogueEntry } from './registry.js';
