/**
 * Child process of test/locks.test.ts: a supervisor process that takes the update locks of
 * app 1's services `main` and `worker`, and kills itself with SIGKILL just before its Nth
 * synchronous file-system change (open, write, fsync, link, rename, remove...). That is a
 * `kill -9` at exactly one step of taking the locks, the ledger writes in the store
 * included; the parent frees what is left as the next supervisor process would.
 * Prints "taken" when it got through every step (N was past the last one).
 * Usage: lock-taker.ts <lockRoot> <dataDir> <N>
 */
import fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { UpdateLocks } from '../../src/supervisor/state/locks.js';
import { DeviceStore } from '../../src/supervisor/state/store.js';
import { initialRecord } from './store-writer.js';

const [lockRoot, dataDir, nth] = process.argv.slice(2);
const store = DeviceStore.open(dataDir!, initialRecord);
const locks = new UpdateLocks({
  lockRoot: lockRoot!,
  ledger: store.lockLedger(),
  owner: { instance: `taker-${nth}`, boot: 'boot-a', pid: process.pid },
});

const changes = ['openSync', 'writeSync', 'fsyncSync', 'closeSync', 'linkSync', 'renameSync', 'rmSync', 'unlinkSync', 'mkdirSync', 'writeFileSync'] as const;
let left = Number(nth);
const patchable = fs as unknown as Record<string, (...args: unknown[]) => unknown>;
for (const name of changes) {
  const real = patchable[name]!;
  patchable[name] = (...args: unknown[]) => {
    if (--left === 0) process.kill(process.pid, 'SIGKILL');
    return real(...args);
  };
}
// The modules above imported these by name; make those bindings see the patched functions.
syncBuiltinESMExports();

locks.acquire(1, ['main', 'worker'], false);
process.stdout.write('taken\n');
