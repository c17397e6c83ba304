/**
 * Update locks (DECISIONS.md item 7). A service's lock is the existence of
 * `<lockRoot>/<appId>/<serviceName>/updates.lock`; the directory is mounted into the
 * service's container. The supervisor takes the same files with O_EXCL before it stops or
 * replaces a service, so the app and the supervisor can never both believe they hold it.
 * It remembers which files it holds itself, so a lock check made while it is mid-update
 * (stopping a service under its lock) is not mistaken for an app's lock.
 */
import { mkdirSync, openSync, closeSync, existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { locked } from '../../errors.js';

export const LOCK_FILE = 'updates.lock';

export interface HeldLocks {
  release(): void;
}

export class UpdateLocks {
  /** Lock files the supervisor holds now (taken by acquire, not yet released). */
  readonly #ours = new Set<string>();

  constructor(private readonly lockRoot: string) {}

  dir(appId: number, serviceName: string): string {
    return join(this.lockRoot, String(appId), serviceName);
  }

  ensureDir(appId: number, serviceName: string): string {
    const dir = this.dir(appId, serviceName);
    mkdirSync(dir, { recursive: true });
    return dir;
  }

  /** Services of the app whose lock file exists now. */
  held(appId: number, serviceNames: string[]): string[] {
    return serviceNames.filter((s) => existsSync(join(this.dir(appId, s), LOCK_FILE)));
  }

  /**
   * Takes the locks of these services for the supervisor. Without force, any lock already
   * held refuses the whole set (423) and nothing stays taken; with force, app-held locks are
   * removed first.
   */
  acquire(appId: number, serviceNames: string[], force: boolean): HeldLocks {
    const taken: string[] = [];
    const release = () => {
      for (const file of taken.splice(0)) {
        this.#ours.delete(file);
        rmSync(file, { force: true });
      }
    };
    try {
      for (const service of serviceNames) {
        const file = join(this.ensureDir(appId, service), LOCK_FILE);
        if (force) rmSync(file, { force: true });
        try {
          closeSync(openSync(file, 'wx'));
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw lockedBy(appId, service);
          throw err;
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
    rmSync(join(this.lockRoot, String(appId)), { recursive: true, force: true });
  }
}

function lockedBy(appId: number, service: string) {
  return locked(`Updates are locked: service "${service}" of app ${appId} holds the update lock; retry with force to override`);
}
