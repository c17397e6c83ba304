/**
 * Where the sim stack keeps its state: one `run-*` directory per start under a state root,
 * with an owner file naming the stack's process and the session label its processes carry
 * (src/processes.ts). A clean stop removes the directory; a stack killed with -9 leaves it,
 * with its processes and its device's containers, networks and volumes, and the next start
 * in the same root reaps all of them before it starts anything.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, join } from 'node:path';
import Docker from 'dockerode';
import { FleetlabError, errorText } from '../src/errors.js';
import { ownerRecord, reapStale, writeOwner } from '../src/owned-dirs.js';
import { removeDeviceLeftovers, storedUuid } from './device-leftovers.js';

const RUN_PREFIX = 'run-';
const RUN_FILE = 'run.json';

/** `$XDG_STATE_HOME/fleetlab/stack`, else `~/.local/state/fleetlab/stack`. */
export function defaultStackStateDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_STATE_HOME || join(homedir(), '.local', 'state'), 'fleetlab', 'stack');
}

export interface StackRun {
  /** The run's directory: the cloud's and the device's data. */
  readonly dir: string;
  /** The label every process the run starts carries. */
  readonly session: string;
}

interface RunRecord {
  /** The engine the run's device created its containers in (absent: the simulated engine, which lives in the run's directory). */
  dockerSocket?: string;
}

/** The device's containers, networks and volumes of a run whose stack was killed before its stop. */
async function removeRunLeftovers(dir: string): Promise<void> {
  let record: RunRecord;
  try {
    record = JSON.parse(readFileSync(join(dir, RUN_FILE), 'utf8')) as RunRecord;
  } catch {
    return;
  }
  const uuid = storedUuid(join(dir, 'device'));
  if (record.dockerSocket && uuid) await removeDeviceLeftovers(new Docker({ socketPath: record.dockerSocket }), uuid);
}

/** Stops and removes what runs in `root` killed before their stop left; returns their directories. */
export function reapStaleRuns(root: string): Promise<string[]> {
  return reapStale(root, RUN_PREFIX, async (_owner, dir) => {
    try {
      await removeRunLeftovers(dir);
    } catch (err) {
      // The directory stays (it names the device), so the next start tries again.
      throw new FleetlabError('SUP_ERR_ENGINE', `cannot clean up after the stack run ${dir}, killed before its stop: ${errorText(err)}`, { cause: err });
    }
  });
}

/**
 * Reaps stale runs, then makes this run's directory. It appears under its `run-` name only
 * with its owner file written, so a concurrent start never takes it for a stale one.
 */
export async function openRun(root: string, record: RunRecord): Promise<{ run: StackRun; reaped: string[] }> {
  mkdirSync(root, { recursive: true, mode: 0o700 });
  const reaped = await reapStaleRuns(root);
  const draft = await mkdtemp(join(root, '.new-'));
  const dir = join(root, `${RUN_PREFIX}${basename(draft).slice('.new-'.length)}`);
  const session = `stack-${basename(dir)}-${process.pid}`;
  writeFileSync(join(draft, RUN_FILE), JSON.stringify(record));
  writeOwner(draft, ownerRecord({ session }));
  renameSync(draft, dir);
  return { run: { dir, session }, reaped };
}
