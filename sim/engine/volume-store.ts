/**
 * The engine's volumes: real directories under `<dataDir>/volumes/<name>/_data` (the
 * Mountpoint), created on demand by Binds, refused removal while a container uses them.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { anyOf, labelsMatch, type Filters } from './filters.js';
import { badParameter, conflict, noSpace, noSuchVolume, serverError } from './api-error.js';
import type { EventBus } from './events.js';
import { isoAt, randomId, type VolumeRecord, type WallClock } from './model.js';
import type { FaultSet } from './scenario.js';

export interface VolumeStoreDeps {
  dataDir: string;
  faults: FaultSet;
  events: EventBus;
  clock: WallClock;
  save: () => Promise<void>;
  /** Ids of the containers (any state) that mount this volume. */
  usersOf: (name: string) => string[];
}

export interface CreateVolumeBody {
  Name?: string;
  Driver?: string;
  Labels?: Record<string, string> | null;
  DriverOpts?: Record<string, string> | null;
}

export class VolumeStore {
  private readonly volumes = new Map<string, VolumeRecord>();

  constructor(private readonly deps: VolumeStoreDeps) {
    mkdirSync(join(deps.dataDir, 'volumes'), { recursive: true });
  }

  load(records: VolumeRecord[]): void {
    for (const v of records) this.volumes.set(v.name, v);
  }

  records(): VolumeRecord[] {
    return [...this.volumes.values()];
  }

  get(name: string): VolumeRecord | undefined {
    return this.volumes.get(name);
  }

  find(name: string): VolumeRecord {
    const v = this.volumes.get(name);
    if (!v) throw noSuchVolume(name);
    return v;
  }

  /** Creates a volume; an existing name returns the existing one, as dockerd does. */
  create(body: CreateVolumeBody): VolumeRecord {
    const name = body.Name || randomId();
    if (!/^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/.test(name)) {
      throw badParameter(`create ${name}: "${name}" includes invalid characters for a local volume name, only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host directory, use absolute path`);
    }
    const existing = this.volumes.get(name);
    if (existing) return existing;
    const mountpoint = join(this.deps.dataDir, 'volumes', name, '_data');
    if (this.deps.faults.diskFull) throw serverError(`create ${name}: ${noSpace(`mkdir ${mountpoint}`)}`);
    mkdirSync(mountpoint, { recursive: true });
    const v: VolumeRecord = { name, driver: body.Driver || 'local', labels: body.Labels ?? {}, options: body.DriverOpts ?? null, createdAt: isoAt(this.deps.clock()).replace(/\.\d+Z$/, 'Z'), mountpoint };
    this.volumes.set(name, v);
    this.deps.events.emit('volume', 'create', name, { driver: v.driver });
    void this.deps.save();
    return v;
  }

  list(f: Filters): VolumeRecord[] {
    return this.records().filter(
      (v) =>
        labelsMatch(f, v.labels) &&
        anyOf(f, 'name', (n) => v.name.includes(n)) &&
        anyOf(f, 'driver', (d) => v.driver === d) &&
        anyOf(f, 'dangling', (d) => (d === 'true' || d === '1') === (this.deps.usersOf(v.name).length === 0)),
    );
  }

  remove(name: string, force: boolean): void {
    const v = this.volumes.get(name);
    if (!v) {
      if (force) return;
      throw noSuchVolume(name);
    }
    const users = this.deps.usersOf(name);
    if (users.length) throw conflict(`remove ${name}: volume is in use - [${users.join(', ')}]`);
    rmSync(join(this.deps.dataDir, 'volumes', name), { recursive: true, force: true });
    this.volumes.delete(name);
    this.deps.events.emit('volume', 'destroy', name, { driver: v.driver });
    void this.deps.save();
  }
}
