/**
 * What a test run leaves behind: the containers, volumes and networks its devices made on a
 * shared dockerd, and its temporary directories, each named with the owner (a test file, a
 * worker) that made it. A suite's global setup starts the watch, its teardown fails the run
 * on what `leftovers()` finds.
 *
 * Only this run's own things count: the same dockerd and /tmp serve other runs at the same
 * time (a CI checkout, the HIL suite, a developer's `fleetlab sim device`), whose objects carry
 * the same labels. So ownership is proven, never guessed from timing:
 * - every owner's processes get a TMPDIR of their own under the run dir (`makeOwnerDir`), so a
 *   temporary directory is the owner's by where it is;
 * - an engine object names its device (`io.fleetlab.device`), and a device is the owner's when
 *   the supervisor's store (`device.json`, written before the supervisor touches the engine)
 *   lies in that owner's TMPDIR. The store is gone by the end of a clean test, so the engine's
 *   `create` events are followed while the run lasts and each object is placed when it
 *   appears; one seen before its store (a replay writes the store last) is placed at a later
 *   event or at the end, if its store is found by then;
 * - a container-target device (hil/targets/container.ts) names the process that started it
 *   (the owner's, or a child of it) and the host directory it runs in, which is added to that
 *   owner's places to look.
 * Objects with neither label (testcontainers' own, an engine contract test's) are not followed.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { readFile, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import Docker from 'dockerode';
import { USER_TMP_NAME } from '../../src/user-tmp.js';
import { FleetlabError, errorText } from '../../src/errors.js';
import { LABEL } from '../../src/protocol/engine-labels.js';
import { ancestry } from '../../src/processes.js';
import { TARGET_LABEL } from './target-labels.js';

export type LeftoverKind = 'container' | 'volume' | 'network' | 'directory';

export interface Leftover {
  readonly kind: LeftoverKind;
  /** The engine's name of the object, or the directory's path. */
  readonly name: string;
  /** The test file or worker that made it. */
  readonly owner: string;
}

/** The file in an owner's directory that says whose it is (and which process it was). */
const OWNER_FILE = '.owner.json';
/**
 * Entries of an owner's TMPDIR that are other tools' and outlive a process on purpose, as
 * they do in the machine's /tmp: the compile caches of tsx and Playwright and testcontainers'
 * lock files.
 */
const FOREIGN = /^(tsx-\d+|playwright-transform-cache-\d+|testcontainers-node(-sshd)?\.lock)$/;
/** How deep below an owner's directory a device's store is looked for (a stack run: <state root>/run-*\/device/supervisor/device.json). */
const STORE_DEPTH = 6;

interface OwnerRecord {
  owner: string;
  pid: number;
}

/**
 * Makes a directory in the run dir for `owner`'s processes to use as TMPDIR, marked with the
 * owner and `pid` (the process that will start container-target devices). The name is short:
 * unix sockets live a few levels below it (108 bytes in all).
 */
export function makeOwnerDir(runDir: string, owner: string, pid = process.pid): string {
  const dir = join(runDir, randomBytes(3).toString('hex'));
  mkdirSync(dir);
  // What /tmp is (sticky, anyone may add): a test's processes run as other users too (postgres).
  chmodSync(dir, 0o1777);
  writeFileSync(join(dir, OWNER_FILE), JSON.stringify({ owner, pid } satisfies OwnerRecord));
  return dir;
}

const gone = (err: unknown) => (err as { statusCode?: number; code?: string }).statusCode === 404 || (err as { code?: string }).code === 'ENOENT';

interface EngineEvent {
  Type?: string;
  Action?: string;
  Actor?: { ID?: string; Attributes?: Record<string, string> };
}

interface Seen {
  kind: Exclude<LeftoverKind, 'directory'>;
  id: string;
  name: string;
  labels: Record<string, string>;
}

export interface RunLeftoversOptions {
  dockerSocket: string;
  /** The run's directory, holding one directory per owner (`makeOwnerDir`). */
  runDir: string;
}

export class RunLeftovers {
  readonly #docker: Docker;
  readonly #runDir: string;
  #events: Readable | undefined;
  #partial = '';
  /** Events are placed one at a time, in order: a walk of the run dir is not run twice at once. */
  #work: Promise<void> = Promise.resolve();
  /** Engine objects of this run's devices, by kind and id, with their owner. */
  readonly #placed = new Map<string, Seen & { owner: string }>();
  /** Objects seen with a device or owner label that no owner has claimed (yet). */
  readonly #unplaced = new Map<string, Seen>();
  /** Owners by device uuid and by the pid of the process that runs them. */
  readonly #deviceOwners = new Map<string, string>();
  readonly #pidOwners = new Map<number, string>();
  /** Host directories of container-target devices, with their owner. */
  readonly #extraDirs = new Map<string, string>();
  /** `sync` calls waiting for their marker's event, by the marker's name. */
  readonly #waiters = new Map<string, { resolve: () => void; reject: (err: Error) => void }>();
  /** What went wrong while watching: the check cannot vouch for the run, so it fails with these. */
  readonly #problems: string[] = [];
  #closed = false;

  private constructor(options: RunLeftoversOptions) {
    this.#docker = new Docker({ socketPath: options.dockerSocket });
    this.#runDir = options.runDir;
  }

  /** Starts following the engine; resolves once the event stream is open, before anything of the run exists. */
  static async start(options: RunLeftoversOptions): Promise<RunLeftovers> {
    const watch = new RunLeftovers(options);
    await watch.#follow(undefined);
    return watch;
  }

  async #follow(since: number | undefined): Promise<void> {
    // Where a reopened stream starts: the second of the last event seen, else of this opening.
    let last = since ?? Math.floor(Date.now() / 1000);
    const stream = (await this.#docker.getEvents({
      ...(since !== undefined ? { since } : {}),
      filters: { type: ['container', 'volume', 'network'], event: ['create'] },
    })) as unknown as Readable;
    this.#events = stream;
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const lines = (this.#partial + chunk).split('\n');
      this.#partial = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.trim()) continue;
        let event: EngineEvent & { time?: number };
        try {
          event = JSON.parse(line) as EngineEvent & { time?: number };
        } catch (err) {
          this.#problems.push(`an engine event that is not JSON (${errorText(err)}): ${line.slice(0, 200)}`);
          continue;
        }
        last = event.time ?? last;
        this.#work = this.#work.then(() => this.#onCreate(event)).catch((err: unknown) => void this.#problems.push(`placing ${event.Type} ${event.Actor?.ID}: ${errorText(err)}`));
        const waiter = this.#waiters.get(event.Actor?.ID ?? '');
        if (waiter) void this.#work.then(waiter.resolve);
      }
    });
    stream.on('error', () => undefined); // its close follows, and says what matters
    stream.on('close', () => {
      if (this.#closed || this.#events !== stream) return;
      // From the last event's second again: an event seen twice is placed once, none is lost.
      this.#partial = '';
      this.#follow(last).catch((err: unknown) => {
        const problem = `the engine's event stream closed and could not be opened again: ${errorText(err)}`;
        this.#problems.push(problem);
        for (const waiter of this.#waiters.values()) waiter.reject(new FleetlabError('SUP_ERR_ENGINE', problem));
      });
    });
  }

  async #onCreate(event: EngineEvent): Promise<void> {
    const id = event.Actor?.ID;
    if (!id || event.Action !== 'create') return;
    let seen: Seen;
    try {
      if (event.Type === 'container') {
        const attributes = event.Actor?.Attributes ?? {};
        seen = { kind: 'container', id, name: attributes.name ?? id, labels: attributes };
      } else if (event.Type === 'volume') {
        const v = await this.#docker.getVolume(id).inspect();
        seen = { kind: 'volume', id, name: v.Name, labels: v.Labels ?? {} };
      } else if (event.Type === 'network') {
        const n = await this.#docker.getNetwork(id).inspect();
        seen = { kind: 'network', id, name: n.Name as string, labels: (n.Labels as Record<string, string> | undefined) ?? {} };
      } else return;
    } catch (err) {
      if (gone(err)) return; // removed already: nothing left of it
      throw err;
    }
    if (!seen.labels[LABEL.device] && !seen.labels[TARGET_LABEL.owner]) return;
    const key = `${seen.kind}:${id}`;
    this.#unplaced.set(key, seen);
    this.#claim();
    // Another run's objects stay unplaced for good: only a new one sends us looking.
    if (this.#unplaced.has(key)) await this.#lookAndClaim();
  }

  /**
   * Reads the run's directories and gives every unplaced object whose device or starting
   * process is found there its owner, again while a container-target device names a
   * directory not read yet.
   */
  async #lookAndClaim(): Promise<void> {
    for (let lookAgain = true; lookAgain; ) {
      const dirs = this.#extraDirs.size;
      await this.#readOwners();
      this.#claim();
      // A container-target device named a directory not looked in yet: its stores may own what is left.
      lookAgain = this.#unplaced.size > 0 && this.#extraDirs.size > dirs;
    }
  }

  #claim(): void {
    for (const [key, seen] of this.#unplaced) {
      // The starting process, or one of its parents (a Playwright worker under the runner), owns it.
      const pid = Number(seen.labels[TARGET_LABEL.owner]);
      const starter = pid > 0 ? ancestry(pid).map((p) => this.#pidOwners.get(p)).find((o) => o !== undefined) : undefined;
      const owner = starter ?? this.#deviceOwners.get(seen.labels[LABEL.device] ?? '');
      if (!owner) continue;
      this.#unplaced.delete(key);
      this.#placed.set(key, { ...seen, owner });
      const dir = seen.labels[TARGET_LABEL.dir];
      if (starter && dir) this.#extraDirs.set(dir, owner);
    }
  }

  /** The run's owners by process, and the device stores in their directories. */
  async #readOwners(): Promise<void> {
    for (const entry of await readdir(this.#runDir).catch(() => [])) {
      const dir = join(this.#runDir, entry);
      const record = await ownerOf(dir);
      if (!record) continue; // not an owner's directory, or one being made right now
      this.#pidOwners.set(record.pid, record.owner);
      for (const uuid of await storesIn(dir)) this.#deviceOwners.set(uuid, record.owner);
    }
    for (const [dir, owner] of this.#extraDirs) for (const uuid of await storesIn(dir)) this.#deviceOwners.set(uuid, owner);
  }

  /**
   * Resolves once every engine event up to now has been placed: the engine sends events in
   * order, so it creates a marker volume (removed again) and waits for the marker's event.
   */
  async sync(): Promise<void> {
    const name = `fleetlab-leftovers-sync-${randomBytes(4).toString('hex')}`;
    const placed = new Promise<void>((resolve, reject) => this.#waiters.set(name, { resolve, reject }));
    try {
      await this.#docker.createVolume({ Name: name });
      await placed;
    } finally {
      this.#waiters.delete(name);
      await this.#docker.getVolume(name).remove().catch((err: unknown) => {
        if (!gone(err)) throw err;
      });
    }
  }

  /**
   * Everything of this run still there: engine objects of its devices, owners' temporary
   * directories and container-target host directories.
   */
  async leftovers(): Promise<Leftover[]> {
    await this.sync();
    const filters = (label: string) => ({ filters: { label: [label] } });
    const [byDevice, byTarget, volumes, networks] = await Promise.all([
      this.#docker.listContainers({ all: true, ...filters(LABEL.device) }),
      this.#docker.listContainers({ all: true, ...filters(TARGET_LABEL.owner) }),
      this.#docker.listVolumes(filters(LABEL.device)),
      this.#docker.listNetworks(filters(LABEL.device)),
    ]);
    const present = new Map<string, Seen>();
    for (const c of [...byDevice, ...byTarget]) present.set(`container:${c.Id}`, { kind: 'container', id: c.Id, name: (c.Names[0] ?? c.Id).replace(/^\//, ''), labels: c.Labels });
    for (const v of volumes.Volumes ?? []) present.set(`volume:${v.Name}`, { kind: 'volume', id: v.Name, name: v.Name, labels: v.Labels ?? {} });
    for (const n of networks) present.set(`network:${n.Id}`, { kind: 'network', id: n.Id, name: n.Name, labels: n.Labels ?? {} });
    for (const [key, seen] of present) if (!this.#placed.has(key)) this.#unplaced.set(key, seen);
    await this.#lookAndClaim();
    const found: Leftover[] = [];
    for (const [key, p] of this.#placed) if (present.has(key)) found.push({ kind: p.kind, name: p.name, owner: p.owner });
    for (const entry of await readdir(this.#runDir).catch(() => [])) {
      const dir = join(this.#runDir, entry);
      const record = await ownerOf(dir);
      if (!record) {
        found.push({ kind: 'directory', name: dir, owner: 'this run' });
        continue;
      }
      for (const name of await readdir(dir)) {
        if (name === OWNER_FILE || FOREIGN.test(name)) continue;
        // A user's own directory (src/user-tmp.ts) stays, as it does in /tmp; what is in it is the run's.
        if (USER_TMP_NAME.test(name)) {
          for (const inner of await readdir(join(dir, name)).catch(() => [])) if (!FOREIGN.test(inner)) found.push({ kind: 'directory', name: join(dir, name, inner), owner: record.owner });
          continue;
        }
        found.push({ kind: 'directory', name: join(dir, name), owner: record.owner });
      }
    }
    for (const [dir, owner] of this.#extraDirs) if (await stat(dir).then(() => true, () => false)) found.push({ kind: 'directory', name: dir, owner });
    if (this.#problems.length > 0) throw new FleetlabError('SUP_ERR_INTERNAL', `the leftover check could not follow the engine: ${this.#problems.join('; ')}`);
    return found;
  }

  /** Stops following the engine. */
  close(): void {
    this.#closed = true;
    this.#events?.destroy();
  }
}

async function ownerOf(dir: string): Promise<OwnerRecord | undefined> {
  return readFile(join(dir, OWNER_FILE), 'utf8').then((t) => JSON.parse(t) as OwnerRecord, () => undefined);
}

/** uuids of the device stores (`device.json`) below `dir`, a few levels deep; a directory removed meanwhile holds none. */
async function storesIn(dir: string, depth = STORE_DEPTH): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const found: string[] = [];
  for (const e of entries) {
    if (e.isFile() && e.name === 'device.json') {
      const uuid = await readFile(join(dir, e.name), 'utf8').then((t) => (JSON.parse(t) as { uuid?: unknown }).uuid, () => undefined);
      if (typeof uuid === 'string') found.push(uuid);
    } else if (e.isDirectory() && depth > 1) found.push(...(await storesIn(join(dir, e.name), depth - 1)));
  }
  return found;
}

/** One line per leftover, grouped by owner: what a failed check prints. */
export function describeLeftovers(found: readonly Leftover[]): string {
  const byOwner = new Map<string, Leftover[]>();
  for (const l of found) byOwner.set(l.owner, [...(byOwner.get(l.owner) ?? []), l]);
  return [...byOwner].map(([owner, list]) => `${owner}:\n${list.map((l) => `  ${l.kind} ${l.name}`).join('\n')}`).join('\n');
}

/**
 * Removes what `leftovers()` found: containers (with their anonymous volumes) first, as a
 * network or volume in use cannot go before them. Returns what could not be removed, or
 * undefined.
 */
export async function removeLeftovers(dockerSocket: string, found: readonly Leftover[]): Promise<string | undefined> {
  const docker = new Docker({ socketPath: dockerSocket });
  const order: LeftoverKind[] = ['container', 'network', 'volume', 'directory'];
  const failures: string[] = [];
  for (const kind of order) {
    for (const l of found.filter((f) => f.kind === kind)) {
      const removal =
        kind === 'container' ? docker.getContainer(l.name).remove({ force: true, v: true })
        : kind === 'network' ? docker.getNetwork(l.name).remove()
        : kind === 'volume' ? docker.getVolume(l.name).remove()
        : rm(l.name, { recursive: true, force: true });
      await removal.catch((err: unknown) => {
        if (!gone(err)) failures.push(`${kind} ${l.name}: ${errorText(err)}`);
      });
    }
  }
  return failures.length > 0 ? `these stayed: ${failures.join('; ')}` : undefined;
}

export interface LeftoverCheck {
  /** The run's directory: each owner makes its TMPDIR in it (`makeOwnerDir`). */
  readonly runDir: string;
  /**
   * Throws naming everything of the run still there, by owner, after removing it (the machine's
   * dockerd and /tmp are shared, so what a run leaves would pile up); removes the run's
   * directory and stops watching either way.
   */
  finish(): Promise<void>;
}

/** Starts holding a run to leaving nothing behind; call before anything of the run exists. */
export async function startLeftoverCheck(dockerSocket: string): Promise<LeftoverCheck> {
  const runDir = mkdtempSync(join(tmpdir(), 'fleetlab-run-'));
  // Other users' processes of the run reach their TMPDIR through it.
  chmodSync(runDir, 0o755);
  let watch: RunLeftovers;
  try {
    watch = await RunLeftovers.start({ dockerSocket, runDir });
  } catch (err) {
    await rm(runDir, { recursive: true, force: true });
    throw err;
  }
  return {
    runDir,
    async finish() {
      try {
        const found = await watch.leftovers();
        if (found.length === 0) return;
        const removal = await removeLeftovers(dockerSocket, found);
        throw new FleetlabError('SUP_ERR_INTERNAL', `the run left ${found.length} thing(s) behind (removed now${removal ? `, except that ${removal}` : ''}):\n${describeLeftovers(found)}`);
      } finally {
        watch.close();
        await rm(runDir, { recursive: true, force: true });
      }
    },
  };
}
