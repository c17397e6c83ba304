/**
 * Keeps this replica alive in the directory and clears out the dead ones: a beat, then a
 * sweep, every `intervalMs`. A beat that finds its own row gone (the first beat, or another
 * replica judged this one dead during a long pause) registers and claims its tunnels again.
 */
import type { ReplicaDirectory } from './replica-directory.js';

export interface ReplicaHeartbeatDeps {
  readonly directory: ReplicaDirectory;
  /** The tunnels this replica holds now. */
  held(): ReadonlyArray<{ uuid: string; deviceId: number }>;
  readonly intervalMs: number;
  now(): Date;
  readonly log: { warn(message: string): void };
}

export interface ReplicaHeartbeat {
  /** Stops beating and leaves the directory: this replica's devices are offline at once. */
  stop(): Promise<void>;
}

export async function startReplicaHeartbeat(deps: ReplicaHeartbeatDeps): Promise<ReplicaHeartbeat> {
  const { directory } = deps;
  // The first beat finds no row and registers; a database that is down now is retried at
  // the next beat rather than failing the start (the row is only others' view of this one).
  const tick = async (): Promise<void> => {
    const at = deps.now().toISOString();
    if (!(await directory.beat())) await directory.reclaim(deps.held(), at);
    await directory.sweep(at);
  };
  let running = tick().catch((err) => deps.log.warn(`replica heartbeat: ${String(err)}`));
  await running;
  const timer = setInterval(() => {
    running = running.then(() => tick().catch((err) => deps.log.warn(`replica heartbeat: ${String(err)}`)));
  }, deps.intervalMs);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
      // Best effort: if the database is gone already, the other replicas' sweep does this.
      await directory.leave(deps.now().toISOString()).catch((err) => deps.log.warn(`replica leaving: ${String(err)}`));
    },
  };
}
