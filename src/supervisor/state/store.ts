/**
 * The device's persistent store: one JSON document that must survive kill -9 and power cuts.
 * Every write goes to a temporary file, is fsynced, renamed over the old file and the
 * directory is fsynced, so a reader sees either the old or the new document, never a torn one.
 * Writes are serialised: concurrent updates apply in call order.
 */
import { mkdirSync, readFileSync, existsSync } from 'node:fs';
import { removeStaleTemps, writeFileAtomicSync as writeFileAtomic } from '../../atomic-file.js';
import { join } from 'node:path';
import { FleetlabError, errorText } from '../../errors.js';
import type { TargetState } from '../../protocol/target-state.js';
import type { LockLedger, LockRecord } from './locks.js';

export interface DeviceRecord {
  uuid: string;
  /** Device key: may call every endpoint; shared with the cloud. */
  deviceKey: string;
  /** Keys scoped to one app, handed to its labelled services. */
  appKeys: Record<string, string>;
  localMode: boolean;
  /** Last name received (cloud or local target state). */
  deviceName: string;
  /** Target state set in local mode. */
  localTarget: TargetState | null;
  /** Last target state received from the cloud. */
  cloudTarget: TargetState | null;
  /** Set once the cloud has acknowledged the registration. */
  registered: boolean;
  /**
   * The key this device authenticates to the cloud with, fixed at registration. Kept apart
   * from the device API key so regenerating that key never cuts the device off the cloud.
   */
  cloudKey: string;
  /** Update-lock files the supervisor holds, written ahead of taking them (see locks.ts). */
  supervisorLocks?: LockRecord[];
  /** Bumped on every write; lets tests and tools see the document advance. */
  generation: number;
}

type RequiredKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? never : K }[keyof T];

/** Every field a record must hold; the compiler keeps the list whole. */
const REQUIRED_FIELDS = Object.keys({
  uuid: 0,
  deviceKey: 0,
  appKeys: 0,
  localMode: 0,
  deviceName: 0,
  localTarget: 0,
  cloudTarget: 0,
  registered: 0,
  cloudKey: 0,
  generation: 0,
} satisfies Record<RequiredKeys<DeviceRecord>, 0>);

export class DeviceStore {
  private record: DeviceRecord;
  private queue: Promise<void> = Promise.resolve();

  private constructor(private readonly path: string, record: DeviceRecord) {
    this.record = record;
  }

  /**
   * Opens the store in dataDir, creating it from `initial()` on first start. A record an older
   * supervisor wrote gets the fields it lacks from `initial()`; a whole one is taken as it is,
   * without calling `initial()`, which mints a uuid and a key (and loads crypto to do it).
   */
  static open(dataDir: string, initial: () => DeviceRecord): DeviceStore {
    mkdirSync(dataDir, { recursive: true });
    const path = join(dataDir, 'device.json');
    // A writer killed mid-write leaves its temporary file; the document itself is whole.
    removeStaleTemps(path);
    if (!existsSync(path)) {
      const record = initial();
      writeFileAtomic(path, JSON.stringify(record, null, 2));
      return new DeviceStore(path, record);
    }
    let record: DeviceRecord;
    try {
      record = JSON.parse(readFileSync(path, 'utf8')) as DeviceRecord;
    } catch (err) {
      // Atomic writes make this unreachable short of disk corruption; refuse to guess.
      throw new FleetlabError('SUP_ERR_INTERNAL', `device store ${path} is unreadable: ${errorText(err)}`);
    }
    if (typeof record !== 'object' || record === null || Array.isArray(record)) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `device store ${path} holds no device record (${JSON.stringify(record)})`);
    }
    const whole = REQUIRED_FIELDS.every((field) => field in record);
    return new DeviceStore(path, whole ? record : { ...initial(), ...record });
  }

  get(): Readonly<DeviceRecord> {
    return this.record;
  }

  /** Applies `change` to a copy and persists it; resolves once the document is durable. */
  update(change: (current: DeviceRecord) => Partial<DeviceRecord>): Promise<DeviceRecord> {
    const run = this.queue.then(() => this.updateNow(change));
    this.queue = run.then(() => undefined, () => undefined);
    return run;
  }

  /**
   * The same as update, durable when it returns, for a writer that must not go on before its
   * record is on disk (a lock written ahead of taking it). Queued updates still see its change:
   * each computes its document from the latest one when it runs.
   */
  updateNow(change: (current: DeviceRecord) => Partial<DeviceRecord>): DeviceRecord {
    const next = { ...this.record, ...change(this.record) };
    next.generation = this.record.generation + 1;
    writeFileAtomic(this.path, JSON.stringify(next, null, 2));
    this.record = next;
    return next;
  }

  /** The supervisor's lock ledger, kept in this document. */
  lockLedger(): LockLedger {
    return {
      read: () => this.record.supervisorLocks ?? [],
      write: (records) => void this.updateNow(() => ({ supervisorLocks: records })),
    };
  }
}
