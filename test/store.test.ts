/**
 * DeviceStore: the persistent device document. Round trip, survival of kill -9 in the middle
 * of a stream of writes (a real child process, really killed), and call-order serialisation.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { DeviceStore, type DeviceRecord } from '../src/supervisor/state/store.js';
import { digestOf, initialRecord, payloadFor } from './helpers/store-writer.js';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const writerScript = fileURLToPath(new URL('./helpers/store-writer.ts', import.meta.url));

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fleetlab-store-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const initial = (over: Partial<DeviceRecord> = {}) => (): DeviceRecord => ({ ...initialRecord(), ...over });

describe('DeviceStore round trip', () => {
  it('creates the document on first open, then update/get/generation and reopen agree', async () => {
    const store = DeviceStore.open(dir, initial());
    expect(store.get().generation).toBe(0);
    expect(JSON.parse(await readFile(join(dir, 'device.json'), 'utf8'))).toEqual(initialRecord());

    const r1 = await store.update(() => ({ deviceName: 'lab-7', localMode: true }));
    expect(r1.generation).toBe(1);
    expect(store.get()).toEqual({ ...initialRecord(), deviceName: 'lab-7', localMode: true, generation: 1 });
    const r2 = await store.update((current) => ({ appKeys: { ...current.appKeys, '1': 'k1' } }));
    expect(r2.generation).toBe(2);
    expect(r2.deviceName).toBe('lab-7');

    // Reopen: the stored document wins over a fresh initial(); generation continues.
    const reopened = DeviceStore.open(dir, initial({ uuid: 'another-uuid', deviceKey: 'another-key' }));
    expect(reopened.get()).toEqual(store.get());
    expect(reopened.get().uuid).toBe('store-writer-uuid');
    expect((await reopened.update(() => ({}))).generation).toBe(3);
    expect(JSON.parse(await readFile(join(dir, 'device.json'), 'utf8')).generation).toBe(3);
  });

  it('a change cannot set the generation itself', async () => {
    const store = DeviceStore.open(dir, initial());
    const r = await store.update(() => ({ generation: 100 }));
    expect(r.generation).toBe(1);
  });

  it('fields missing from an older document take their initial values', async () => {
    const { localTarget: _dropped, ...older } = { ...initialRecord(), generation: 4, deviceName: 'old' };
    await writeFile(join(dir, 'device.json'), JSON.stringify(older));
    const store = DeviceStore.open(dir, initial());
    expect(store.get().localTarget).toBeNull();
    expect(store.get().deviceName).toBe('old');
    expect(store.get().generation).toBe(4);
  });

  it('a document that is JSON but no record is refused, not replaced by a fresh identity', async () => {
    for (const text of ['null', '[]', '7']) {
      await writeFile(join(dir, 'device.json'), text);
      expect(() => DeviceStore.open(dir, initial())).toThrow(`device store ${join(dir, 'device.json')} holds no device record (${text})`);
    }
  });

  it('a whole document is opened without calling initial() (it mints a uuid and a key)', () => {
    DeviceStore.open(dir, initial());
    let calls = 0;
    const reopened = DeviceStore.open(dir, () => (calls++, initialRecord()));
    expect(calls).toBe(0);
    expect(reopened.get()).toEqual(initialRecord());
  });

  it('an unreadable document is refused with a FleetlabError naming the file', async () => {
    await writeFile(join(dir, 'device.json'), '{"uuid": "trunc');
    let caught: unknown;
    try {
      DeviceStore.open(dir, initial());
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(FleetlabError);
    expect((caught as FleetlabError).code).toBe('SUP_ERR_INTERNAL');
    expect((caught as FleetlabError).message).toContain(join(dir, 'device.json'));
  });
});

interface WriterRun {
  printed: number[];
  signal: NodeJS.Signals | null;
  code: number | null;
  stderr: string;
}

/** Runs the writer in `dataDir`, SIGKILLs it once it has printed `killAfter` generations. */
function runWriterAndKill(dataDir: string, killAfter: number): Promise<WriterRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', writerScript, dataDir, '5000'], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let stderr = '';
    let seen = 0;
    let killed = false;
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      out += chunk;
      seen = out.split('\n').length - 1;
      if (!killed && seen >= killAfter) {
        killed = true;
        child.kill('SIGKILL');
      }
    });
    child.stderr.on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    // 'close' fires after stdout is drained, so every line written before the kill is in `out`.
    child.on('close', (code, signal) => {
      const printed = out
        .split('\n')
        .slice(0, -1) // the text after the last newline is not a complete line
        .map(Number);
      resolve({ printed, signal, code, stderr });
    });
  });
}

function checkDocument(raw: string): DeviceRecord {
  const record = JSON.parse(raw) as DeviceRecord;
  const counter = Number(record.appKeys.counter);
  expect(counter).toBe(record.generation);
  expect(record.deviceName).toBe(`gen-${record.generation}`);
  expect(record.appKeys.payload!.length).toBe(payloadFor(record.generation).length);
  expect(record.appKeys.payload === payloadFor(record.generation)).toBe(true);
  expect(record.appKeys.digest).toBe(digestOf(record.appKeys.payload!));
  return record;
}

describe('DeviceStore survives kill -9 during writes', () => {
  it('after each of several kills the document parses, is whole, and holds every durable generation', { timeout: 120_000 }, async () => {
    // One data dir across the runs: each run continues the previous one's document and
    // meets whatever the previous kill left behind (e.g. a temporary file).
    let lastDurable = 0;
    for (const killAfter of [3, 8, 1, 15, 5]) {
      const run = await runWriterAndKill(dir, killAfter);
      expect(run.stderr).toBe('');
      expect(run.signal).toBe('SIGKILL');
      expect(run.printed.length).toBeGreaterThanOrEqual(killAfter);
      // Each run prints consecutive generations continuing from the previous run.
      expect(run.printed[0]).toBeGreaterThan(lastDurable);
      run.printed.forEach((g, i) => expect(g).toBe(run.printed[0]! + i));
      const printedMax = run.printed[run.printed.length - 1]!;

      const raw = await readFile(join(dir, 'device.json'), 'utf8');
      const onDisk = checkDocument(raw);
      expect(onDisk.generation).toBeGreaterThanOrEqual(printedMax);
      // At most the one write in flight when the kill came can be ahead of what was printed.
      expect(onDisk.generation).toBeLessThanOrEqual(printedMax + 1);

      // The production open path reads the same document.
      const reopened = DeviceStore.open(dir, initial());
      expect(reopened.get().generation).toBe(onDisk.generation);
      expect(reopened.get().appKeys).toEqual(onDisk.appKeys);
      lastDurable = onDisk.generation;
    }
    // Reopening removed the temporary files of killed writers: only the document is left.
    expect(await readdir(dir)).toEqual(['device.json']);
  });
});

describe('DeviceStore serialises concurrent updates', () => {
  it('updates issued without awaiting apply in call order, each seeing the previous one', async () => {
    const store = DeviceStore.open(dir, initial());
    const n = 40;
    const pending: Promise<DeviceRecord>[] = [];
    for (let i = 0; i < n; i++) {
      pending.push(store.update((current) => ({ deviceName: current.deviceName === 'store-writer' ? `${i}` : `${current.deviceName},${i}` })));
    }
    const results = await Promise.all(pending);
    expect(results.map((r) => r.generation)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    const expected = Array.from({ length: n }, (_, i) => i).join(',');
    expect(store.get().deviceName).toBe(expected);
    expect(DeviceStore.open(dir, initial()).get().deviceName).toBe(expected);
  });

  it('a change that throws rejects its own update only; later ones still apply in order', async () => {
    const store = DeviceStore.open(dir, initial());
    const first = store.update(() => ({ deviceName: 'a' }));
    const failing = store.update(() => {
      throw new Error('bad change');
    });
    const third = store.update((current) => ({ deviceName: `${current.deviceName}b` }));
    await expect(failing).rejects.toThrow('bad change');
    expect((await first).generation).toBe(1);
    const last = await third;
    expect(last.generation).toBe(2);
    expect(last.deviceName).toBe('ab');
    expect(DeviceStore.open(dir, initial()).get()).toEqual(last);
  });
});
