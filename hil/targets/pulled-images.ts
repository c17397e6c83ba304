/**
 * The `images` protocol of the targets whose device pulls its release (qemu, board): images are
 * built in the arm64 build engine, pushed to a registry fleetlab runs on this host's loopback,
 * and the device reaches that registry at the same `127.0.0.1:<port>` through an SSH remote
 * forward, so its dockerd pulls over plain HTTP as from any loopback registry: no TLS, no
 * daemon setting on the board, and the same image reference on both ends.
 *
 * The engine and registry start on the first deploy and are kept for the worker's life (the
 * board's), stopped with it; the forward lives on each SSH session that deploys (`over`). The
 * registry half is worker-registry.ts, which the sim target on the simulated engine shares.
 *
 * The forward ends at a partitionable link in front of the registry, not at the registry
 * itself: a device whose network drops (`network.partition()`) loses its downloads too.
 */
import { existsSync } from 'node:fs';
import { reapStaleBuildEngines, startBuildEngine, type BuildEngine } from '../release/build-engine.js';
import type { Registry } from '../release/registry.js';
import type { ImagesProtocol, ReleaseEngine } from '../../device-access/protocols.js';
import type { SshDevice } from '../../device-access/ssh-device.js';
import { reapAbandonedRegistries, WorkerRegistry } from './worker-registry.js';
import { startPartitionableLink, type PartitionableLink } from '../../sim/network/partitionable-link.js';

/** This machine's dockerd as the source of `image:` services' images, when it runs. */
function hostImageSource(architecture: string): Pick<ReleaseEngine, 'imageSource'> {
  const engineSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
  return existsSync(engineSocket) ? { imageSource: { engineSocket, architecture } } : {};
}

/** The registries and build engines of workers that are gone (killed with -9), stopped and removed; returns what was removed. */
export async function reapAbandonedPulls(): Promise<string[]> {
  return [...(await reapAbandonedRegistries()), ...(await reapStaleBuildEngines())];
}

export class PulledImages {
  #started: Promise<{ engine: BuildEngine; registry: Registry; link: PartitionableLink }> | undefined;
  #link: PartitionableLink | undefined;
  readonly #registry: WorkerRegistry;
  #engine: BuildEngine | undefined;

  constructor(private readonly log: (line: string) => void = (line) => process.stderr.write(`${line}\n`)) {
    this.#registry = new WorkerRegistry(log);
  }

  /** The `images` protocol of the device behind `ssh`: its loopback gets the registry's port. */
  over(ssh: SshDevice): ImagesProtocol {
    return {
      prepare: async (): Promise<ReleaseEngine> => {
        const { engine, registry, link } = await this.#start();
        await ssh.forwardRemote(registry.port, { host: '127.0.0.1', port: Number(new URL(link.url).port) });
        return { engineSocket: engine.socketPath, registry: registry.host, ...hostImageSource(engine.architecture) };
      },
    };
  }

  /** The device's path to the registry, once a release was deployed; undefined before. */
  get link(): PartitionableLink | undefined {
    return this.#link;
  }

  #start(): Promise<{ engine: BuildEngine; registry: Registry; link: PartitionableLink }> {
    this.#started ??= (async () => {
      const registry = await this.#registry.start();
      this.#link = await startPartitionableLink({ host: '127.0.0.1', port: registry.port });
      this.#engine = await startBuildEngine({ progress: this.log });
      this.log(`registry for the device: ${registry.host}, reached on the device's loopback through SSH (log: ${registry.logPath})`);
      return { engine: this.#engine, registry, link: this.#link };
    })().catch(async (err: unknown) => {
      await this.close();
      throw err;
    });
    return this.#started;
  }

  /** The registry's manifest fetches so far: one line per image the device (or anyone) pulled. */
  pulls(): string[] {
    return this.#registry.pulls();
  }

  async close(): Promise<void> {
    this.#started = undefined;
    await this.#engine?.close().catch(() => undefined);
    await this.#link?.close().catch(() => undefined);
    await this.#registry.close();
    this.#engine = undefined;
    this.#link = undefined;
  }
}
