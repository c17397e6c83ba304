/**
 * The registry a worker's devices pull their releases from: Debian's Distribution registry on
 * this host's loopback (hil/release/registry.ts), started on the first deploy and kept until the
 * worker (or the one device that owns it) closes. Shared by the targets whose device pulls: the
 * qemu and board targets (pulled-images.ts, behind an SSH forward) and the sim target on the
 * simulated engine (sim.ts, which reaches loopback directly).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { reapStale } from '../../src/owned-dirs.js';
import { startRegistry, type Registry } from '../release/registry.js';
import { engineAt } from '../../src/engine-client/engine-at.js';
import type { ImagesProtocol, ReleaseEngine } from '../../device-access/protocols.js';

/** A worker's registry directory; one a killed worker left is reaped by the next. */
export const REGISTRY_DIR_PREFIX = 'fleetlab-registry-';

/** Stops the registries of workers that are gone (killed with -9) and removes their directories; returns those removed. */
export function reapAbandonedRegistries(): Promise<string[]> {
  return reapStale(tmpdir(), REGISTRY_DIR_PREFIX);
}

export class WorkerRegistry {
  #started: Promise<Registry> | undefined;
  #dir: string | undefined;
  #registry: Registry | undefined;

  constructor(private readonly log: (line: string) => void = (line) => process.stderr.write(`${line}\n`)) {}

  /** The registry, started on the first call; a failed start leaves nothing behind and is tried again next time. */
  start(): Promise<Registry> {
    this.#started ??= (async () => {
      await reapAbandonedRegistries();
      this.#dir = await mkdtemp(join(tmpdir(), REGISTRY_DIR_PREFIX));
      this.#registry = await startRegistry({ dir: this.#dir });
      return this.#registry;
    })().catch(async (err: unknown) => {
      await this.close();
      throw err;
    });
    return this.#started;
  }

  /** The registry's manifest fetches so far: one line per image a device (or anyone) pulled. */
  pulls(): string[] {
    return this.#registry?.pulls() ?? [];
  }

  async close(): Promise<void> {
    const pulls = this.pulls();
    if (pulls.length) this.log(`registry ${this.#registry!.host} served ${pulls.length} pull(s); the last: ${pulls[pulls.length - 1]}`);
    this.#started = undefined;
    await this.#registry?.close().catch(() => undefined);
    if (this.#dir) await rm(this.#dir, { recursive: true, force: true });
    this.#registry = undefined;
    this.#dir = undefined;
  }
}

/**
 * `images` on the simulated engine: the release is built in the host's dockerd and pushed to the
 * worker's registry, which the device's engine pulls from at the same `127.0.0.1:<port>` (no
 * forward: the simulated device's loopback is the host's).
 */
export function pulledFromRegistry(registry: WorkerRegistry, hostDockerSocket: string): ImagesProtocol {
  return {
    prepare: async (): Promise<ReleaseEngine> => {
      // The simulated engine builds nothing, so a release needs the host's dockerd all the same.
      await engineAt(
        hostDockerSocket,
        'install and start dockerd (apt-get install docker.io; systemctl start docker; scripts/provision does both), or set FLEETLAB_DOCKER_SOCKET',
        'deploy() on the simulated engine builds the release in dockerd and pushes it to a registry the device pulls from, but ',
      );
      const { host } = await registry.start();
      return { engineSocket: hostDockerSocket, registry: host };
    },
  };
}
