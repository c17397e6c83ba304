/**
 * The simulated registry: a catalogue of images the engine can "pull". Each entry has layers
 * with sizes (what download progress counts against) and an image config (Cmd, Env, Labels:
 * what a container of it does, see process-model.ts). Digests are derived from the content
 * description, so the same catalogue always yields the same digests and image ids.
 */
import { defaultCommand, testImages } from '../images/test-images.js';
import { normaliseRef, sha256, type ImageConfig } from './model.js';

export interface CatalogueEntry {
  /** repository:tag */
  ref: string;
  layers: Array<{ size: number }>;
  config: Partial<ImageConfig>;
}

export interface ResolvedImage {
  ref: string;
  layers: Array<{ digest: string; size: number }>;
  config: ImageConfig;
  /** The image id: the digest of the config. */
  id: string;
  /** The manifest digest (what `RepoDigests` and the "Digest:" line show). */
  digest: string;
  created: string;
}

export const defaultCatalogue: readonly CatalogueEntry[] = [
  ...testImages.map((image) => ({
    ref: image.ref,
    // About the size of the locally built image (Debian's static busybox), in two layers.
    layers: [{ size: 1_210_000 }, { size: 770_000 }],
    config: { Cmd: defaultCommand(image.banner), WorkingDir: '/' },
  })),
  { ref: 'busybox:latest', layers: [{ size: 772_000 }], config: { Cmd: ['sh'] } },
];

const CREATED = '2026-01-01T00:00:00Z';

export class SimRegistry {
  private readonly images = new Map<string, ResolvedImage>();

  constructor(catalogue: readonly CatalogueEntry[] = defaultCatalogue) {
    for (const entry of catalogue) {
      const ref = normaliseRef(entry.ref);
      const layers = entry.layers.map((l, i) => ({ digest: `sha256:${sha256(`${ref}#layer${i}#${l.size}`)}`, size: l.size }));
      const config: ImageConfig = {
        Cmd: entry.config.Cmd ?? null,
        Entrypoint: entry.config.Entrypoint ?? null,
        Env: entry.config.Env ?? ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
        Labels: entry.config.Labels ?? null,
        WorkingDir: entry.config.WorkingDir ?? '',
      };
      const configJson = JSON.stringify({ config, rootfs: layers.map((l) => l.digest) });
      const id = `sha256:${sha256(configJson)}`;
      this.images.set(ref, { ref, layers, config, id, digest: `sha256:${sha256(`manifest:${configJson}`)}`, created: CREATED });
    }
  }

  resolve(ref: string): ResolvedImage | undefined {
    return this.images.get(normaliseRef(ref));
  }

  hasRepository(repo: string): boolean {
    for (const ref of this.images.keys()) if (ref.slice(0, ref.lastIndexOf(':')) === repo) return true;
    return false;
  }

  refs(): string[] {
    return [...this.images.keys()];
  }
}
