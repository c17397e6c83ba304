/**
 * Child process of test/store.test.ts: opens the production DeviceStore in <dir> and makes
 * sequential updates, each writing the generation it produces as a counter plus a ~100 KB
 * payload derived from it. After each update resolves (the document is durable) it prints
 * that generation on its own line. The parent SIGKILLs it mid-run.
 * Usage: store-writer.ts <dir> [maxUpdates]
 */
import { createHash } from 'node:crypto';
import { realpathSync, writeSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DeviceStore } from '../../src/supervisor/state/store.js';

/** ~100 KB, different for every generation, so a torn or mixed document cannot pass. */
export function payloadFor(generation: number): string {
  return createHash('sha256').update(`payload-${generation}`).digest('hex').repeat(1600);
}

export const digestOf = (text: string) => createHash('sha256').update(text).digest('hex');

export const initialRecord = () => ({
  uuid: 'store-writer-uuid',
  deviceKey: 'store-writer-key',
  appKeys: {},
  localMode: false,
  deviceName: 'store-writer',
  localTarget: null,
  cloudTarget: null,
  registered: false,
  cloudKey: '',
  generation: 0,
});

async function main(dir: string, maxUpdates: number): Promise<void> {
  const store = DeviceStore.open(dir, initialRecord);
  for (let i = 0; i < maxUpdates; i++) {
    const record = await store.update((current) => {
      const generation = current.generation + 1;
      const payload = payloadFor(generation);
      return { deviceName: `gen-${generation}`, appKeys: { counter: String(generation), payload, digest: digestOf(payload) } };
    });
    // Synchronous write: the line is in the pipe before the next update starts.
    writeSync(1, `${record.generation}\n`);
  }
}

/** Run as a program (not when the test imports the helpers above). */
if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  const dir = process.argv[2];
  if (!dir) {
    process.stderr.write('usage: store-writer.ts <dir> [maxUpdates]\n');
    process.exit(2);
  }
  await main(dir, Number(process.argv[3] ?? 5000));
}
