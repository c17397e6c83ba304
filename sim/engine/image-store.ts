/**
 * The engine's images: lookup by tag, digest or (short) id, tagging (a tag moves off any other
 * image, as in dockerd), removal with dockerd's conflict rules.
 */
import { badParameter, conflict, noSuchImage, noSuchImageInspect } from './api-error.js';
import type { EventBus } from './events.js';
import { normaliseRef, type ImageRecord } from './model.js';

export interface ImageStoreDeps {
  events: EventBus;
  save: () => Promise<void>;
  /** Ids of the containers made from this image. */
  usersOf: (imageId: string) => string[];
}

export class ImageStore {
  private readonly images = new Map<string, ImageRecord>();

  constructor(private readonly deps: ImageStoreDeps) {}

  load(records: ImageRecord[]): void {
    for (const i of records) this.images.set(i.id, i);
  }

  records(): ImageRecord[] {
    return [...this.images.values()];
  }

  find(ref: string): ImageRecord | undefined {
    if (ref.startsWith('sha256:')) return this.images.get(ref) ?? this.records().find((i) => i.id.startsWith(ref));
    const n = normaliseRef(ref);
    for (const i of this.images.values()) if (i.repoTags.includes(n) || i.repoDigests.includes(ref)) return i;
    if (/^[0-9a-f]{4,64}$/.test(ref)) return this.records().find((i) => i.id.slice(7).startsWith(ref));
    return undefined;
  }

  /** Adds (or re-tags) an image. */
  add(image: Omit<ImageRecord, 'repoTags' | 'repoDigests'>, tag: string | null, digest: string | null): void {
    const record: ImageRecord = this.images.get(image.id) ?? { ...image, repoTags: [], repoDigests: [] };
    if (tag) this.setTag(record, tag, false);
    if (digest && !record.repoDigests.includes(digest)) record.repoDigests.push(digest);
    this.images.set(record.id, record);
    void this.deps.save();
  }

  private setTag(record: ImageRecord, ref: string, emit = true): void {
    const tag = normaliseRef(ref);
    for (const other of this.images.values()) if (other !== record) other.repoTags = other.repoTags.filter((t) => t !== tag);
    if (!record.repoTags.includes(tag)) record.repoTags.push(tag);
    if (emit) this.deps.events.emit('image', 'tag', record.id, { name: tag });
  }

  tag(ref: string, repo: string, tag: string | null): void {
    const image = this.find(ref);
    if (!image) throw noSuchImage(ref);
    if (!repo) throw badParameter('repository name must have at least one component');
    this.setTag(image, `${repo}:${tag || 'latest'}`);
    void this.deps.save();
  }

  inspect(ref: string): ImageRecord {
    const image = this.find(ref);
    if (!image) throw noSuchImageInspect(ref);
    return image;
  }

  remove(ref: string, force: boolean): Array<{ Untagged?: string; Deleted?: string }> {
    const { events } = this.deps;
    const image = this.find(ref);
    if (!image) throw noSuchImage(ref);
    const users = this.deps.usersOf(image.id);
    const byTag = !ref.startsWith('sha256:') && image.repoTags.includes(normaliseRef(ref));
    if (byTag && image.repoTags.length > 1) {
      const tag = normaliseRef(ref);
      image.repoTags = image.repoTags.filter((t) => t !== tag);
      events.emit('image', 'untag', image.id, { name: tag });
      void this.deps.save();
      return [{ Untagged: tag }];
    }
    if (users.length && !force) {
      const user = users[0]!.slice(0, 12);
      if (byTag) throw conflict(`conflict: unable to remove repository reference "${ref}" (must force) - container ${user} is using its referenced image ${image.id.slice(7, 19)}`);
      throw conflict(`conflict: unable to delete ${image.id.slice(7, 19)} (must be forced) - image is being used by stopped container ${user}`);
    }
    const out: Array<{ Untagged?: string; Deleted?: string }> = [];
    for (const t of image.repoTags) {
      out.push({ Untagged: t });
      events.emit('image', 'untag', image.id, { name: t });
    }
    for (const d of image.repoDigests) out.push({ Untagged: d });
    if (users.length) {
      // Forced while in use: dockerd only untags, the image stays for its containers.
      image.repoTags = [];
      image.repoDigests = [];
    } else {
      this.images.delete(image.id);
      out.push({ Deleted: image.id });
      events.emit('image', 'delete', image.id, { name: image.id });
    }
    void this.deps.save();
    return out;
  }

  /** Layer digests present in the engine (for "Already exists" during a pull). */
  presentLayers(): Set<string> {
    return new Set(this.records().flatMap((i) => i.layers));
  }

  get size(): number {
    return this.images.size;
  }
}
