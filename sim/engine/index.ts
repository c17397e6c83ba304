/**
 * The simulated Docker Engine: `startSimEngine()` serves the Engine API on a unix socket, with
 * a simulated registry, fault injection and state kept in `dataDir`, so a simulated device
 * runs with no dockerd. See sim/README.md ("Simulated engine") for the model and its limits.
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { dirname, resolve } from 'node:path';
import type { Socket } from 'node:net';
import { FleetlabError, errorText } from '../../src/errors.js';
import { createControl, type ControlTarget } from './control.js';
import { SimEngine } from './engine.js';
import { createHandler, createUpgradeHandler } from './http-server.js';
import { Link } from './pull.js';
import { SimRegistry, type CatalogueEntry } from './registry.js';
import { RegistryClient } from './registry-client.js';
import { FaultSet, loadScenarioFile, type ContainerFaultSpec, type PullFaultSpec, type Scenario } from './scenario.js';

/** About a slow field uplink: the test images (≈2 MB) take about 2 s. */
export const DEFAULT_BANDWIDTH = 1_000_000;

export interface SimEngineOptions {
  socketPath: string;
  dataDir: string;
  /** The registry catalogue; default: fleetlab's test images and busybox:latest. */
  registry?: readonly CatalogueEntry[];
  /** Registry bandwidth in bytes/s. */
  bandwidth?: number;
  /** A scenario object or the path of a scenario file. */
  scenario?: Scenario | string;
}

export interface SimEngineHandle extends ControlTarget, AsyncDisposable {
  readonly socketPath: string;
  readonly dataDir: string;
  /** The current engine (a restart replaces it with one loaded from disk). */
  readonly engine: SimEngine;
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
  const socketPath = resolve(options.socketPath);
  const dataDir = resolve(options.dataDir);
  // sun_path holds 108 bytes with its terminating NUL.
  if (Buffer.byteLength(socketPath) > 107) throw new FleetlabError('SUP_ERR_ENGINE', `simulated engine: socket path too long for a unix socket (${Buffer.byteLength(socketPath)} > 107 bytes): ${socketPath}`);
  mkdirSync(dataDir, { recursive: true });
  mkdirSync(dirname(socketPath), { recursive: true });
  const scenario = typeof options.scenario === 'string' ? loadScenarioFile(options.scenario) : options.scenario;
  const faults = new FaultSet();
  const registry = new SimRegistry(options.registry);
  const registryClient = new RegistryClient();
  const link = new Link(options.bandwidth ?? scenario?.bandwidth ?? DEFAULT_BANDWIDTH);
  let engine = new SimEngine(dataDir, faults);
  let restarting: Promise<void> = Promise.resolve();
  let closed = false;
  const timers: NodeJS.Timeout[] = [];
  const sockets = new Set<Socket>();

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
        await new Promise((r) => setTimeout(r, opts.downMs ?? 500));
        if (closed) return;
        engine = new SimEngine(dataDir, faults);
        engine.boot();
        await listen(server, socketPath);
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
      rmSync(socketPath, { force: true });
    },
    [Symbol.asyncDispose]() {
      return handle.close();
    },
  };

  const httpDeps = { engine: () => engine, registry, registryClient, faults, link, control: createControl(() => handle) };
  const server = createServer(createHandler(httpDeps));
  server.on('upgrade', createUpgradeHandler(httpDeps));
  server.keepAliveTimeout = 0;
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  async function stopServing(): Promise<void> {
    if (!server.listening) return;
    const done = new Promise<void>((r) => server.close(() => r()));
    // Connections drop, as when dockerd goes away: streams (logs, events, pulls) end.
    for (const s of sockets) s.destroy();
    await done;
  }

  try {
    await listen(server, socketPath);
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
