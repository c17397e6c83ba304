/**
 * "No update lock the app holds is ignored": while a point runs, the app's lock files and the
 * services' containers are sampled together. A service whose lock the app held at two samples
 * in a row must keep the same running container between them; a new container, or none,
 * means the supervisor stopped it under the app's lock.
 *
 * The supervisor takes the same file while it stops a service, with its mark in it
 * (src/supervisor/state/locks.ts); a file with that mark is the supervisor's own and not the
 * app's. A sample the device did not answer (power off, supervisor down) breaks the run of
 * samples: across it the lock may have gone with the tmpfs it lived on, and come back.
 *
 * Sampled, so judged only where it cannot be wrong: a lock the app released and the
 * supervisor took between two samples is legitimate, and looks the same at this distance as a
 * lock file the supervisor deleted itself. What is caught is a service stopped while its lock
 * file stayed the app's: a supervisor that did not look.
 */
import type { StatusContainer } from '../../src/protocol/device-api.js';
import { sleep } from '../../src/wait.js';
import { isSupervisorMark, LOCK_FILE } from '../../src/supervisor/state/locks.js';
import type { Broken } from './invariants.js';
import type { SweepDevice } from './device.js';

export interface LockSample {
  readonly atMs: number;
  /** Per service: whether the app holds its lock; absent when the device could not be read. */
  readonly appHolds?: ReadonlyMap<string, boolean>;
  /** Per service: its running container, or undefined when none runs. */
  readonly running?: ReadonlyMap<string, string | undefined>;
}

/** The first pair of samples that shows a container replaced or stopped under the app's lock. */
export function ignoredLock(samples: readonly LockSample[]): Broken | undefined {
  for (let i = 1; i < samples.length; i++) {
    const [before, after] = [samples[i - 1]!, samples[i]!];
    if (!before.appHolds || !after.appHolds || !before.running || !after.running) continue;
    for (const [service, held] of before.appHolds) {
      if (!held || !after.appHolds.get(service)) continue;
      const was = before.running.get(service);
      const is = after.running.get(service);
      if (was !== undefined && was !== is) {
        const what = is === undefined ? 'stopped' : `replaced (container ${was.slice(0, 12)} → ${is.slice(0, 12)})`;
        return { invariant: 'update-lock', detail: `${service} was ${what} between ${before.atMs} and ${after.atMs} ms while the app held its update lock` };
      }
    }
  }
  return undefined;
}

export interface LockWatch {
  /** Stops sampling; the samples taken, in order. */
  stop(): Promise<LockSample[]>;
}

/**
 * Samples the device every `intervalMs` until stopped. Needs the device's shell and its lock
 * root; without them it takes no samples, and the invariant has nothing to judge.
 */
export function watchLocks(device: SweepDevice, o: { appId: number; services: readonly string[]; intervalMs: number; maxSamples: number }): LockWatch {
  const started = Date.now();
  const samples: LockSample[] = [];
  let stopped = false;
  const loop = (async () => {
    if (!watchable(device)) return;
    // Bounded: a point that never settles still ends its watch.
    for (let i = 0; i < o.maxSamples && !stopped; i++) {
      const taken = Date.now();
      samples.push({ atMs: taken - started, ...(await sample(device, o.appId, o.services)) });
      await sleep(Math.max(0, o.intervalMs - (Date.now() - taken)));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return samples;
    },
  };
}

const watchable = (device: SweepDevice): boolean => device.exec !== undefined && device.paths?.lockRoot !== undefined;

async function sample(device: SweepDevice, appId: number, services: readonly string[]): Promise<Omit<LockSample, 'atMs'>> {
  const root = device.paths!.lockRoot!;
  const files = services.map((s) => `${root}/${appId}/${s}/${LOCK_FILE}`);
  // One command for every lock: on an emulated board each command is a round trip over SSH.
  const script = 'for f in "$@"; do if [ -e "$f" ]; then printf "%s\\t" "$f"; head -c 200 "$f" | tr -d "\\n"; echo; fi; done';
  try {
    const [locks, status] = await Promise.all([device.exec!.run(['sh', '-c', script, 'locks', ...files]), device.status()]);
    if (locks.exitCode !== 0) return {};
    const present = new Map(locks.stdout.split('\n').filter(Boolean).map((line) => [line.split('\t')[0]!, line.slice(line.indexOf('\t') + 1)] as const));
    const appHolds = new Map(services.map((s, i) => {
      const content = present.get(files[i]!);
      return [s, content !== undefined && !isSupervisorMark(content)] as const;
    }));
    const running = new Map(services.map((s) => [s, runningContainer(status.containers, s)] as const));
    return { appHolds, running };
  } catch {
    return {};
  }
}

const runningContainer = (containers: readonly StatusContainer[], service: string) => containers.find((c) => c.serviceName === service && c.status === 'Running')?.containerId;
