/**
 * Update locks (docs/decisions.md item 7). A service's lock is the existence of
 * `<lockRoot>/<appId>/<serviceName>/updates.lock`; the directory is mounted into the
 * service's container. The supervisor takes the same files exclusively (a hard link that fails
 * when the file exists, as O_EXCL does) before it stops or replaces a service, so the app and
 * the supervisor can never both believe they hold it.
 *
 * The supervisor's own lock files must never outlive it: a supervisor killed while it holds
 * one would otherwise come back, see the file, take it for the app's and wait forever. So
 * every lock it takes is written ahead to a ledger in its store (with the identity of the
 * process that took it) and the file itself carries that identity. At start, `releaseStale`
 * removes the files a previous supervisor process recorded, but only those whose content is
 * still that process's mark: a file the app created at the same path since is honoured.
 */
import { closeSync, constants, existsSync, fchmodSync, fsyncSync, linkSync, lstatSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { FleetlabError, locked } from '../../errors.js';
import { isRunning } from '../../processes.js';

export const LOCK_FILE = 'updates.lock';

/** The process that took a lock. `instance` is fresh per supervisor start. */
export interface LockOwner {
  instance: string;
  boot: string;
  pid: number;
  /** When that process started (see processes.ts): with the pid, it cannot be mistaken for a later process. */
  start?: string;
}

export interface LockRecord {
  file: string;
  owner: LockOwner;
}

/** Where the supervisor writes down the locks it holds; `write` is durable when it returns. */
export interface LockLedger {
  read(): readonly LockRecord[];
  write(records: LockRecord[]): void;
}

export interface HeldLocks {
  release(): void;
}

export interface UpdateLocksDeps {
  lockRoot: string;
  ledger: LockLedger;
  owner: LockOwner;
  /** Whether that process of this boot still runs (a second supervisor on the same data). */
  running?: (pid: number, start?: string) => boolean;
}

/**
 * Refuses a lock-root path that is a link or not a directory, and, unless it is the service's
 * own directory (made 1777 on purpose), one that users other than its owner may write to: in
 * such a directory another user could swap an entry for a link between this check and the open.
 */
function requireRealDirectory(path: string, leaf: boolean): void {
  const st = lstatSync(path);
  const problem = st.isSymbolicLink() ? 'is a symbolic link' : !st.isDirectory() ? 'is not a directory' : !leaf && (st.mode & 0o022) !== 0 ? `may be written by users other than its owner (mode ${(st.mode & 0o7777).toString(8)})` : undefined;
  if (problem) throw new FleetlabError('SUP_ERR_HOST', `update locks: ${path} ${problem}; another user could use it to redirect the lock directories: remove it and restart the supervisor`);
}

/** What the supervisor writes into a lock file it takes: its mark, recognisable at the next start. */
const markOf = (owner: LockOwner) => JSON.stringify({ lockedBy: 'fleetlab-supervisor', ...owner });

/** Whether a lock file's content is a supervisor's mark (any supervisor's): the lock is not the app's. */
export const isSupervisorMark = (content: string): boolean => content.startsWith('{"lockedBy":"fleetlab-supervisor"');

export class UpdateLocks {
  /** Lock files the supervisor holds now (taken by acquire, not yet released). */
  readonly #ours = new Set<string>();
  readonly #lockRoot: string;

  constructor(private readonly deps: UpdateLocksDeps) {
    this.#lockRoot = deps.lockRoot;
  }

  dir(appId: number, serviceName: string): string {
    return join(this.#lockRoot, String(appId), serviceName);
  }

  /**
   * The service's lock directory, mounted into its container: sticky and writable by everyone
   * (1777, as /tmp, and as balena's supervisor leaves its per-service lock directories), so a
   * service that runs as a user other than root (compose `user:`) can take its lock too, and
   * no user can remove another's file.
   *
   * The lock root usually lives under /tmp, where another local user could plant a link in
   * the path: followed, the supervisor (root) would open /etc to everyone. So every directory
   * from the lock root down must be a real one, and those above the service's writable by
   * their owner alone; the mode is set on the directory opened without following a link. (Who
   * owns the lock root is the operator's setting, as the data directory is: not checked.)
   */
  ensureDir(appId: number, serviceName: string): string {
    const dir = this.dir(appId, serviceName);
    mkdirSync(dir, { recursive: true });
    requireRealDirectory(this.#lockRoot, false);
    requireRealDirectory(join(this.#lockRoot, String(appId)), false);
    requireRealDirectory(dir, true);
    const fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    try {
      // mkdir's mode goes through the umask; fchmod does not.
      fchmodSync(fd, 0o1777);
    } finally {
      closeSync(fd);
    }
    return dir;
  }

  /** Services of the app whose lock file exists now. */
  held(appId: number, serviceNames: string[]): string[] {
    return serviceNames.filter((s) => existsSync(join(this.dir(appId, s), LOCK_FILE)));
  }

  /**
   * Removes the lock files earlier supervisor processes took and never released (killed, or a
   * power cut), and forgets their ledger entries. Returns the files removed. Run once at start,
   * before the first apply; a lock file whose mark is not the recorded one is the app's and stays.
   */
  releaseStale(): string[] {
    const { ledger, owner } = this.deps;
    const running = this.deps.running ?? isRunning;
    const records = ledger.read();
    const keep: LockRecord[] = [];
    const removed: string[] = [];
    for (const record of records) {
      const r = record.owner;
      const sameProcess = r.instance === owner.instance;
      // Another live supervisor process of this boot holds it (two on one data dir): not ours to free.
      const otherLive = !sameProcess && r.boot === owner.boot && r.pid !== owner.pid && running(r.pid, r.start);
      if (sameProcess || otherLive) {
        keep.push(record);
        continue;
      }
      // A kill while the mark was being staged leaves that file beside the lock; it never held the lock.
      rmSync(this.stagedOf(record.file, r), { force: true });
      if (readMark(record.file) === markOf(r)) {
        rmSync(record.file, { force: true });
        removed.push(record.file);
      }
    }
    if (keep.length !== records.length) ledger.write(keep);
    return removed;
  }

  /**
   * Takes the locks of these services for the supervisor. Without force, any lock already
   * held refuses the whole set (423) and nothing stays taken; with force, app-held locks are
   * removed first.
   */
  acquire(appId: number, serviceNames: string[], force: boolean): HeldLocks {
    const taken: string[] = [];
    const release = () => {
      const files = taken.splice(0);
      for (const file of files) {
        this.#ours.delete(file);
        rmSync(file, { force: true });
      }
      // The files go first: a kill between the two leaves a ledger entry with no file, which
      // the next start drops, never a file with no entry.
      if (files.length) this.unrecord(files);
    };
    try {
      for (const service of serviceNames) {
        const file = join(this.ensureDir(appId, service), LOCK_FILE);
        if (force) rmSync(file, { force: true });
        // Written ahead: a kill right after the file is created still leaves its entry.
        this.record(file);
        if (!this.createMarked(file)) {
          this.unrecord([file]);
          throw lockedBy(appId, service);
        }
        taken.push(file);
        this.#ours.add(file);
      }
    } catch (err) {
      release();
      throw err;
    }
    return { release };
  }

  /**
   * Throws 423 when an app holds the lock of any of these services. Locks the supervisor
   * holds itself right now (a service being stopped for an update) are not an app's, and a
   * check takes nothing, so it cannot make an update in flight see a lock either.
   */
  refuseIfAppLocked(appId: number, serviceNames: string[]): void {
    const service = this.held(appId, serviceNames).find((s) => !this.#ours.has(join(this.dir(appId, s), LOCK_FILE)));
    if (service !== undefined) throw lockedBy(appId, service);
  }

  /** Drops an app's lock directories (after the app is removed from the device). */
  forgetApp(appId: number): void {
    rmSync(join(this.#lockRoot, String(appId)), { recursive: true, force: true });
  }

  /**
   * Creates the file holding our mark, or answers false when it exists already. The mark is
   * written to a file of this process's own first and hard-linked into place, which fails if
   * the lock exists, as O_EXCL does: the lock file never exists without its mark. (Created
   * with O_EXCL and written after, a kill between the two left an empty file, the app's kind
   * of lock, that the next start kept and then waited on forever.)
   */
  private createMarked(file: string): boolean {
    const staged = this.stagedOf(file, this.deps.owner);
    // Created, never opened: in a directory anyone may write to, an existing name (a link
    // planted to a file of root's) must fail rather than be written through.
    const fd = openSync(staged, 'wx');
    try {
      writeSync(fd, markOf(this.deps.owner));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    try {
      linkSync(staged, file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw err;
    } finally {
      rmSync(staged, { force: true });
    }
    return true;
  }

  /** Where `createMarked` writes the mark before linking it: beside the lock, named for the process. */
  private stagedOf(file: string, owner: LockOwner): string {
    return `${file}.${owner.instance}.staged`;
  }

  private record(file: string): void {
    const { ledger, owner } = this.deps;
    ledger.write([...ledger.read().filter((r) => r.file !== file), { file, owner }]);
  }

  private unrecord(files: string[]): void {
    const { ledger } = this.deps;
    const gone = new Set(files);
    ledger.write(ledger.read().filter((r) => !gone.has(r.file)));
  }
}

function readMark(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

function lockedBy(appId: number, service: string) {
  return locked(`Updates are locked: service "${service}" of app ${appId} holds the update lock; retry with force to override`);
}
