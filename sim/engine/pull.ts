/**
 * Pulling an image (from the simulated catalogue, or resolved from a loopback registry by
 * registry-client.ts): the newline-delimited JSON progress stream of
 * `POST /images/create?fromImage=`, in dockerd's order and shape ("Pulling from", per layer
 * "Pulling fs layer" / "Waiting" / "Downloading" with progressDetail / "Verifying Checksum" /
 * "Download complete" / "Extracting" / "Pull complete", then "Digest:" and "Status:").
 * Bytes move over a shared Link, so concurrent pulls split its bandwidth as on a real uplink;
 * they are counted, never fetched (a loopback registry's layers are not downloaded either).
 * Faults (scenario.ts) fail a pull in-stream after N bytes, stall it, or fail it for a full disk.
 */
import { randomBytes } from 'node:crypto';
import { noSpace } from './api-error.js';
import type { SimEngine } from './engine.js';
import type { ResolvedImage } from './registry.js';
import type { FaultSet } from './scenario.js';

const TICK_MS = 100;
/** dockerd's max-concurrent-downloads default. */
const CONCURRENT_DOWNLOADS = 3;

/** A shared link: each tick its bandwidth is split among the downloads waiting on it. */
export class Link {
  private readonly waiting = new Set<(bytes: number) => void>();
  private timer: NodeJS.Timeout | undefined;

  constructor(public bytesPerSecond: number) {}

  /** Resolves with the bytes granted to this download for the next tick. */
  next(): Promise<number> {
    return new Promise((resolveGrant) => {
      this.waiting.add(resolveGrant);
      this.timer ??= setTimeout(() => this.tick(), TICK_MS);
    });
  }

  private tick(): void {
    this.timer = undefined;
    const takers = [...this.waiting];
    this.waiting.clear();
    const share = Math.max(1, Math.floor((this.bytesPerSecond * TICK_MS) / 1000 / Math.max(1, takers.length)));
    for (const t of takers) t(share);
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    for (const t of this.waiting) t(0);
    this.waiting.clear();
  }
}

/** go-units HumanSize: decimal units, 4 significant digits. */
export function humanSize(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let size = bytes;
  let i = 0;
  while (size >= 1000 && i < units.length - 1) {
    size /= 1000;
    i++;
  }
  return `${Number(size.toPrecision(4))}${units[i]}`;
}

/** The `progress` text dockerd sends next to progressDetail. */
export function progressBar(current: number, total: number): string {
  const width = 50;
  const bars = Math.min(width, Math.floor((current / total) * width));
  const bar = bars >= width ? '='.repeat(width) : `${'='.repeat(Math.max(0, bars - 1))}>${' '.repeat(width - Math.max(bars, 1))}`;
  return `[${bar}] ${humanSize(current).padStart(8)}/${humanSize(total)}`;
}

export type PullMessage = Record<string, unknown>;

class PullFailed extends Error {}

export interface PullDeps {
  engine: SimEngine;
  faults: FaultSet;
  link: Link;
}

/**
 * Plays one pull, writing messages as they happen. Ends normally after "Status: ..." or with
 * an in-stream error message; stops quietly when `signal` aborts (the client went away).
 */
export async function pullImage(deps: PullDeps, image: ResolvedImage, tagRef: string, write: (m: PullMessage) => void, signal: AbortSignal): Promise<void> {
  const { engine, faults, link } = deps;
  const repo = tagRef.slice(0, tagRef.lastIndexOf(':'));
  const tag = tagRef.slice(tagRef.lastIndexOf(':') + 1);
  const fault = faults.takePull(tagRef);
  // dockerd names the repository without its registry: "Pulling from contract/app".
  const from = /^([^/]*[.:][^/]*|localhost)\//.test(repo) ? repo.slice(repo.indexOf('/') + 1) : repo;
  write({ status: `Pulling from ${from}`, id: tag });
  if (engine.findImage(tagRef)?.id === image.id) {
    write({ status: `Digest: ${image.digest}` });
    write({ status: `Status: Image is up to date for ${tagRef}` });
    return;
  }
  const present = engine.images.presentLayers();
  const layers = image.layers.map((l) => ({ ...l, short: l.digest.slice(7, 19), current: 0, present: present.has(l.digest) }));
  for (const l of layers) write(l.present ? { status: 'Already exists', progressDetail: {}, id: l.short } : { status: 'Pulling fs layer', progressDetail: {}, id: l.short });
  const missing = layers.filter((l) => !l.present);
  missing.slice(CONCURRENT_DOWNLOADS).forEach((l) => write({ status: 'Waiting', progressDetail: {}, id: l.short }));
  let pulled = 0;
  const fail = (message: string): never => {
    write({ errorDetail: { message }, error: message });
    throw new PullFailed(message);
  };

  const download = async (l: (typeof layers)[number]) => {
    while (l.current < l.size) {
      if (signal.aborted) throw new PullFailed('aborted');
      let grant = await link.next();
      if (signal.aborted) throw new PullFailed('aborted');
      if (faults.diskFull) fail(noSpace(`write /var/lib/docker/tmp/GetImageBlob${randomBytes(4).readUInt32BE()}`));
      if (fault?.stallAfterBytes !== undefined && faults.stillStalled(fault)) grant = Math.max(0, Math.min(grant, fault.stallAfterBytes - pulled));
      if (fault?.failAfterBytes !== undefined && pulled + grant >= fault.failAfterBytes) {
        const upTo = Math.max(0, fault.failAfterBytes - pulled);
        l.current += upTo;
        pulled += upTo;
        if (upTo > 0) write({ status: 'Downloading', progressDetail: { current: l.current, total: l.size }, progress: progressBar(l.current, l.size), id: l.short });
        fail(fault.message ?? 'unexpected EOF');
      }
      if (grant === 0) continue;
      const step = Math.min(grant, l.size - l.current);
      l.current += step;
      pulled += step;
      write({ status: 'Downloading', progressDetail: { current: l.current, total: l.size }, progress: progressBar(l.current, l.size), id: l.short });
    }
    write({ status: 'Verifying Checksum', progressDetail: {}, id: l.short });
    write({ status: 'Download complete', progressDetail: {}, id: l.short });
  };

  try {
    // At most CONCURRENT_DOWNLOADS at a time; extraction follows in layer order.
    const queue = [...missing];
    const downloaded = new Map<string, Promise<void>>();
    const workers = Array.from({ length: Math.min(CONCURRENT_DOWNLOADS, queue.length) }, async () => {
      for (let l = queue.shift(); l; l = queue.shift()) {
        const p = download(l);
        downloaded.set(l.digest, p);
        await p;
      }
    });
    const all = Promise.all(workers);
    all.catch(() => undefined);
    for (const l of missing) {
      while (!downloaded.has(l.digest)) await Promise.race([all, new Promise((r) => setTimeout(r, 10))]);
      await downloaded.get(l.digest);
      for (const part of [0.5, 1]) {
        const current = Math.floor(l.size * part);
        write({ status: 'Extracting', progressDetail: { current, total: l.size }, progress: progressBar(current, l.size), id: l.short });
      }
      write({ status: 'Pull complete', progressDetail: {}, id: l.short });
    }
    await all;
  } catch (err) {
    if (err instanceof PullFailed) return;
    throw err;
  }
  engine.images.add({ id: image.id, created: image.created, size: image.layers.reduce((a, l) => a + l.size, 0), layers: image.layers.map((l) => l.digest), config: image.config }, tagRef, `${repo}@${image.digest}`);
  engine.events.emit('image', 'pull', tagRef, { name: repo });
  await engine.save();
  write({ status: `Digest: ${image.digest}` });
  write({ status: `Status: Downloaded newer image for ${tagRef}` });
}
