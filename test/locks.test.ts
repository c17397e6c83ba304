/**
 * UpdateLocks on a real directory: the app's lock and the supervisor's own are the same kind
 * of file, and only the app's may refuse a lock check (a check made while the supervisor
 * stops a service for an update must not answer 423).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { LOCK_FILE, UpdateLocks } from '../src/supervisor/state/locks.js';

let root: string;
let locks: UpdateLocks;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'fleetlab-locks-'));
  locks = new UpdateLocks(root);
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const lockFile = (service: string) => join(root, '1', service, LOCK_FILE);
function appTakes(service: string): void {
  mkdirSync(join(root, '1', service), { recursive: true });
  writeFileSync(lockFile(service), '');
}
function lockedError(fn: () => unknown): FleetlabError | undefined {
  try {
    fn();
  } catch (err) {
    if (err instanceof FleetlabError) return err;
    throw err;
  }
  return undefined;
}

describe('UpdateLocks', () => {
  it('an app-held lock refuses both the supervisor\'s acquire and a check, naming the service', () => {
    appTakes('worker');
    const refused = lockedError(() => locks.acquire(1, ['main', 'worker'], false));
    expect(refused?.code).toBe('SUP_ERR_LOCKED');
    expect(refused?.message).toMatch(/service "worker" of app 1/);
    // Nothing of the refused set stays taken, and the app's file is untouched.
    expect(existsSync(lockFile('main'))).toBe(false);
    expect(existsSync(lockFile('worker'))).toBe(true);
    expect(lockedError(() => locks.refuseIfAppLocked(1, ['main', 'worker']))?.message).toMatch(/service "worker"/);
  });

  it('a lock the supervisor holds itself does not refuse a check, and the check takes nothing', () => {
    const held = locks.acquire(1, ['main'], false);
    expect(existsSync(lockFile('main'))).toBe(true);
    expect(lockedError(() => locks.refuseIfAppLocked(1, ['main', 'worker']))).toBeUndefined();
    expect(existsSync(lockFile('worker'))).toBe(false);
    held.release();
    expect(existsSync(lockFile('main'))).toBe(false);
    // Once released, the same file created by the app is the app's again.
    appTakes('main');
    expect(lockedError(() => locks.refuseIfAppLocked(1, ['main']))?.code).toBe('SUP_ERR_LOCKED');
  });

  it('force removes the app\'s lock and takes it; release frees it', () => {
    appTakes('main');
    const held = locks.acquire(1, ['main'], true);
    expect(lockedError(() => locks.refuseIfAppLocked(1, ['main']))).toBeUndefined();
    held.release();
    expect(existsSync(lockFile('main'))).toBe(false);
  });
});
