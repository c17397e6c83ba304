/**
 * A worker process of a fleet (fleet-workers.ts): runs its sub-shard with Fleet and answers
 * its parent's requests over the IPC channel. When the channel closes (the parent stopped,
 * or was killed) it stops its devices and exits, so nothing it started outlives the run.
 */
import { FleetlabError } from '../../src/errors.js';
import { Fleet } from './fleet.js';
import { faultCountsOf, memoryOf, type WorkerMessage, type WorkerRequest } from './fleet-workers.js';
import { HealthWatch } from './process-health.js';

let fleet: Fleet | null = null;
let watch: HealthWatch | null = null;
let stopping: Promise<void> | null = null;

const send = (m: WorkerMessage) => process.connected && process.send!(m);

function stop(): Promise<void> {
  stopping ??= (fleet?.close() ?? Promise.resolve()).finally(() => process.exit(0));
  return stopping;
}

async function answer(req: WorkerRequest): Promise<unknown> {
  if (req.op === 'start') {
    fleet = await Fleet.start({ ...req.options, onStarted: (started, of) => send({ event: 'started', started, of }) });
    watch = new HealthWatch(fleet.range.label);
    return fleet.range;
  }
  if (req.op === 'close') {
    // Answered first: the exit that follows closes the channel.
    void Promise.resolve().then(stop);
    return null;
  }
  const f = fleet;
  if (!f) throw new FleetlabError('SUP_ERR_INTERNAL', `fleet worker: ${req.op} before start`);
  switch (req.op) {
    case 'faultCounts':
      return faultCountsOf(f);
    case 'counts':
      return f.counts();
    case 'appliedOn':
      return f.appliedOn(req.releaseId);
    case 'stuck':
      return f.stuck(req.releaseId, req.limit);
    case 'unsettled':
      return f.unsettled(req.releaseId);
    case 'health':
      return watch!.sample();
    case 'latencySamples':
      return f.latencySamples();
    case 'memory':
      return memoryOf();
    case 'resetLatency':
      return f.resetLatency();
    case 'partition':
      return f.partition();
    case 'heal':
      return f.heal();
  }
}

process.on('message', (req: WorkerRequest) => {
  answer(req).then(
    (result) => send({ id: req.id, result: result ?? null }),
    (err: unknown) => send({ id: req.id, error: { code: err instanceof FleetlabError ? err.code : 'SUP_ERR_INTERNAL', message: err instanceof Error ? err.message : String(err) } }),
  );
});
process.on('disconnect', () => void stop());
// Ctrl-C reaches the whole process group: the parent decides when workers stop.
process.on('SIGINT', () => undefined);
