/**
 * The engine's persistent state (`<dataDir>/state.json`): images, containers, volumes and
 * networks, so a restarted engine finds them as dockerd does. Written atomically (temp file,
 * fsync, rename); writes are coalesced so a burst of changes costs one write.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { removeStaleTemps, writeFileAtomic } from '../../src/atomic-file.js';
import type { ContainerRecord, ImageRecord, NetworkRecord, VolumeRecord } from './model.js';

export interface PersistedState {
  version: 1;
  images: ImageRecord[];
  containers: ContainerRecord[];
  volumes: VolumeRecord[];
  networks: NetworkRecord[];
}

export class StateFile {
  readonly path: string;
  private writing: Promise<void> | null = null;
  private dirty = false;

  constructor(
    dataDir: string,
    private readonly snapshot: () => PersistedState,
  ) {
    this.path = join(dataDir, 'state.json');
  }

  static read(dataDir: string): PersistedState | null {
    const path = join(dataDir, 'state.json');
    if (!existsSync(path)) return null;
    removeStaleTemps(path);
    return JSON.parse(readFileSync(path, 'utf8')) as PersistedState;
  }

  /** Schedules a write of the current state; returns when it (or a later one) is on disk. */
  save(): Promise<void> {
    this.dirty = true;
    if (!this.writing) {
      this.writing = this.loop().finally(() => {
        this.writing = null;
      });
      // Fire-and-forget callers (`void save()`) must not turn a failed write into an
      // unhandled rejection; callers that await still see it.
      this.writing.catch(() => undefined);
    }
    return this.writing;
  }

  async flush(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private async loop(): Promise<void> {
    while (this.dirty) {
      this.dirty = false;
      await writeFileAtomic(this.path, JSON.stringify(this.snapshot()));
    }
  }
}
