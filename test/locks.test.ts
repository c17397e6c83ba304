/**
 * UpdateLocks on a real directory and the real device store: the app's lock and the
 * supervisor's own are the same kind of file, and only the app's may refuse a lock check (a
 * check made while the supervisor stops a service for an update must not answer 423). A lock
 * an earlier supervisor process took and never released is freed at the next start; an app's
 * lock at the same path is not.
 */
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { LOCK_FILE, UpdateLocks, type LockOwner } from '../src/supervisor/state/locks.js';
import { DeviceStore } from '../src/supervisor/state/store.js';
import { initialRecord } from './helpers/store-writer.js';

let root: string;
let dataDir: string;
let locks: UpdateLocks;
const BOOT = 'boot-a';
let instances = 0;
/** A supervisor process's view: the store as it reads it from disk at its start. */
function supervisorLocks(owner: Partial<LockOwner> = {}): UpdateLocks {
  const store = DeviceStore.open(dataDir, initialRecord);
  return new UpdateLocks({
    lockRoot: root,
    ledger: store.lockLedger(),
    owner: { instance: `instance-${++instances}`, boot: BOOT, pid: process.pid, ...owner },
  });
}
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'fleetlab-locks-'));
  dataDir = await mkdtemp(join(tmpdir(), 'fleetlab-locks-data-'));
  locks = supervisorLocks();
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
  await rm(dataDir, { recursive: true, force: true });
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

const ledgerFiles = () => (DeviceStore.open(dataDir, initialRecord).get().supervisorLocks ?? []).map((r) => r.file);

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

describe('a service that runs as a user other than root', () => {
  it('gets a lock directory it can write (1777, as /tmp), and its lock refuses the supervisor', async () => {
    const dir = locks.ensureDir(1, 'worker');
    expect(statSync(dir).mode & 0o7777).toBe(0o1777);
    if (process.getuid?.() !== 0) return; // taking it as another user needs root to become one
    // The container sees only the mounted directory; on this host the test's own parents must let the user through.
    for (const d of [root, join(root, '1')]) chmodSync(d, 0o755);
    const taken = await new Promise<number | null>((resolve) => spawn('runuser', ['-u', 'nobody', '--', 'touch', join(dir, LOCK_FILE)], { stdio: 'ignore' }).once('exit', resolve));
    expect(taken).toBe(0);
    expect(locks.held(1, ['worker'])).toEqual(['worker']);
    expect(lockedError(() => locks.acquire(1, ['worker'], false))?.code).toBe('SUP_ERR_LOCKED');
  });
});

describe('a lock root another user reached first', () => {
  it('refuses a link planted in the path instead of opening what it points to, and leaves that alone', () => {
    const elsewhere = mkdtempSync(join(tmpdir(), 'fleetlab-locks-target-'));
    try {
      chmodSync(elsewhere, 0o700);
      symlinkSync(elsewhere, join(root, '1'));
      expect(() => locks.ensureDir(1, 'worker')).toThrow(`update locks: ${join(root, '1')} is a symbolic link; another user could use it`);
      expect(statSync(elsewhere).mode & 0o7777).toBe(0o700);
      // The service's own directory as a link: refused as well.
      rmSync(join(root, '1'));
      mkdirSync(join(root, '1'));
      symlinkSync(elsewhere, join(root, '1', 'main'));
      expect(() => locks.ensureDir(1, 'main')).toThrow(/main is a symbolic link/);
      expect(statSync(elsewhere).mode & 0o7777).toBe(0o700);
      // A directory above the service's that others may write to: an entry could be swapped for a link.
      rmSync(join(root, '1'), { recursive: true });
      mkdirSync(join(root, '1'));
      chmodSync(join(root, '1'), 0o777);
      expect(() => locks.ensureDir(1, 'main')).toThrow(/1 may be written by users other than its owner \(mode 777\)/);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });
});

describe('UpdateLocks after the supervisor died holding them', () => {

  it('the next process frees the locks the dead one recorded, and the ledger empties', () => {
    locks.acquire(1, ['main', 'worker'], false); // never released: the process is "killed"
    expect(ledgerFiles().sort()).toEqual([lockFile('main'), lockFile('worker')]);
    const next = supervisorLocks();
    // Before the stale locks go, they look like the app's: this is what made updates wait forever.
    expect(lockedError(() => next.refuseIfAppLocked(1, ['main']))?.code).toBe('SUP_ERR_LOCKED');
    expect(next.releaseStale().sort()).toEqual([lockFile('main'), lockFile('worker')]);
    expect(existsSync(lockFile('main'))).toBe(false);
    expect(existsSync(lockFile('worker'))).toBe(false);
    expect(ledgerFiles()).toEqual([]);
    next.acquire(1, ['main'], false).release();
  });

  it('an app lock created at the same path after the supervisor let go is honoured', () => {
    locks.acquire(1, ['main'], false);
    // The dead supervisor's file is gone (say, removed by hand) and the app took the lock since.
    writeFileSync(lockFile('main'), '');
    const next = supervisorLocks();
    expect(next.releaseStale()).toEqual([]);
    expect(existsSync(lockFile('main'))).toBe(true);
    expect(lockedError(() => next.refuseIfAppLocked(1, ['main']))?.code).toBe('SUP_ERR_LOCKED');
    expect(ledgerFiles()).toEqual([]);
  });

  it('the file carries the owner\'s mark, so the app can tell who holds it', () => {
    locks.acquire(1, ['main'], false);
    expect(JSON.parse(readFileSync(lockFile('main'), 'utf8'))).toMatchObject({ lockedBy: 'fleetlab-supervisor', boot: BOOT, pid: process.pid });
  });

  it('an entry recorded ahead of an O_EXCL that found the app\'s lock is taken back', () => {
    appTakes('main');
    expect(lockedError(() => locks.acquire(1, ['main'], false))?.code).toBe('SUP_ERR_LOCKED');
    expect(ledgerFiles()).toEqual([]);
  });

  it('locks of another live supervisor process of this boot are left alone; of a dead one, freed', async () => {
    const other = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)'], { stdio: 'ignore' });
    try {
      await new Promise((resolve) => other.once('spawn', resolve));
      supervisorLocks({ pid: other.pid! }).acquire(1, ['main'], false);
      supervisorLocks({ pid: 2 ** 22 + 1, boot: 'an-earlier-boot' }).acquire(1, ['worker'], false);
      expect(supervisorLocks().releaseStale()).toEqual([lockFile('worker')]);
      expect(existsSync(lockFile('main'))).toBe(true);
      expect(ledgerFiles()).toEqual([lockFile('main')]);
      other.kill('SIGKILL');
      await new Promise((resolve) => other.once('exit', resolve));
      expect(supervisorLocks().releaseStale()).toEqual([lockFile('main')]);
      expect(ledgerFiles()).toEqual([]);
    } finally {
      other.kill('SIGKILL');
    }
  });
});

describe('kill -9 at each step of taking a lock', () => {
  /** Runs helpers/lock-taker.ts, killed before its nth file-system change; true when it got through. */
  async function takeKilledAt(nth: number): Promise<boolean> {
    const script = fileURLToPath(new URL('./helpers/lock-taker.ts', import.meta.url));
    // No tsx wrapper process: the child that kills itself is the one whose end is checked.
    const child = spawn(process.execPath, ['--import', 'tsx', script, root, dataDir, String(nth)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once('exit', (c, s) => resolve([c, s])));
    if (out.includes('taken')) return true;
    expect(signal, `the taker killed before change ${nth} died of SIGKILL (exit ${code})`).toBe('SIGKILL');
    return false;
  }
  const filesUnder = (dir: string): string[] =>
    readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));

  it('leaves nothing the next start does not free: the locks can be taken again and no file stays', async () => {
    let steps = 0;
    for (let nth = 1; nth <= 100; nth++) {
      const gotThrough = await takeKilledAt(nth);
      // The next supervisor process of the same boot (the dead one's pid is gone).
      const next = supervisorLocks();
      next.releaseStale();
      const where = `killed before change ${nth}`;
      expect(filesUnder(root), `${where}: nothing but the freed lock directories left`).toEqual([]);
      let refused: unknown;
      try {
        next.acquire(1, ['main', 'worker'], false).release();
      } catch (err) {
        refused = err;
      }
      expect(refused && String(refused), `${where}: the next process takes the locks`).toBeUndefined();
      expect(ledgerFiles(), `${where}: the ledger is empty again`).toEqual([]);
      if (gotThrough) {
        steps = nth - 1;
        break;
      }
    }
    // Two locks, each a ledger write, a staged mark and its link: more than a dozen steps.
    expect(steps, 'the taker got through within 100 steps').toBeGreaterThan(12);
  }, 120_000);
});

