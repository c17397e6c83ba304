/**
 * Update locks (DECISIONS.md item 7). A service's lock is the existence of
 * `<lockRoot>/<appId>/<serviceName>/updates.lock`; the directory is mounted into the
 * service's container. The supervisor takes the same files with O_EXCL before it stops or
 * replaces a service, so the app and the supervisor can never both believe they hold it.
 */
import { mkdirSync, openSync, closeSync, existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { locked } from '../../errors.js';

export const LOCK_FILE = 'updates.lock';

export interface HeldLocks {
  release(): void;
}

export class UpdateLocks {
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
      for (const file of taken.splice(0)) rmSync(file, { force: true });
    };
    try {
      for (const service of serviceNames) {
        const file = join(this.ensureDir(appId, service), LOCK_FILE);
        if (force) rmSync(file, { force: true });
        try {
          closeSync(openSync(file, 'wx'));
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
            throw locked(`Updates are locked: service "${service}" of app ${appId} holds the update lock; retry with force to override`);
          }
          throw err;
        }
        taken.push(file);
      }
    } catch (err) {
      release();
      throw err;
    }
    return { release };
  }

  /** Drops an app's lock directories (after the app is removed from the device). */
  forgetApp(appId: number): void {
    rmSync(join(this.lockRoot, String(appId)), { recursive: true, force: true });
  }
}
