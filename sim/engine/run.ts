/**
 * `fleetlab sim engine`: the simulated engine alone, until a signal. Prints one JSON ready
 * line on stdout, so `DOCKER_HOST=unix://<socket> docker ps` works against it.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { untilStopped } from '../../src/stop-signals.js';
import { loadScenarioFile, startSimEngine } from './index.js';

export async function runSimEngine(opts: { socket: string; dataDir?: string; bandwidth?: number; scenario?: string }): Promise<void> {
  // A bad scenario file is refused before anything is created.
  const scenario = opts.scenario ? loadScenarioFile(opts.scenario) : undefined;
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), 'fleetlab-engine-')));
  const engine = await startSimEngine({
    socketPath: opts.socket,
    dataDir,
    ...(opts.bandwidth ? { bandwidth: opts.bandwidth } : {}),
    ...(scenario ? { scenario } : {}),
  });
  const state = engine.state() as { bandwidth: number; registry: string[] };
  process.stdout.write(`${JSON.stringify({ event: 'ready', socket: engine.socketPath, dataDir: engine.dataDir, dockerHost: `unix://${engine.socketPath}`, bandwidth: state.bandwidth, registry: state.registry })}\n`);
  process.stderr.write(`fleetlab: simulated engine on ${engine.socketPath}\n  try: DOCKER_HOST=unix://${engine.socketPath} docker ps\n  stop with Ctrl-C\n`);
  const { done } = untilStopped(() => engine.close());
  await done;
}
