/**
 * API keys (docs/decisions.md items 2-4): the device key may call everything; each app has a key
 * scoped to it, handed to its services that carry the supervisor-api label. Keys live in the
 * device store, so they survive restarts, and a regenerated key replaces the old one at once.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { DeviceStore } from './store.js';

export type Identity = { kind: 'device' } | { kind: 'app'; appId: number };

export const newKey = () => randomBytes(16).toString('hex');

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export class ApiKeys {
  constructor(private readonly store: DeviceStore) {}

  identify(key: string | undefined): Identity | undefined {
    if (!key) return undefined;
    const record = this.store.get();
    if (same(key, record.deviceKey)) return { kind: 'device' };
    for (const [appId, appKey] of Object.entries(record.appKeys)) {
      if (same(key, appKey)) return { kind: 'app', appId: Number(appId) };
    }
    return undefined;
  }

  deviceKey(): string {
    return this.store.get().deviceKey;
  }

  /** The app's scoped key; `ensureAppKeys` must have run for the app first. */
  appKey(appId: number): string {
    return this.store.get().appKeys[String(appId)] ?? '';
  }

  async ensureAppKeys(appIds: number[]): Promise<void> {
    const missing = appIds.filter((id) => !this.store.get().appKeys[String(id)]);
    if (missing.length === 0) return;
    await this.store.update((r) => ({
      appKeys: { ...r.appKeys, ...Object.fromEntries(missing.map((id) => [String(id), newKey()])) },
    }));
  }

  /** Replaces the key of this identity; the old one is refused from the next request on. */
  async regenerate(identity: Identity): Promise<string> {
    const key = newKey();
    if (identity.kind === 'device') await this.store.update(() => ({ deviceKey: key }));
    else await this.store.update((r) => ({ appKeys: { ...r.appKeys, [String(identity.appId)]: key } }));
    return key;
  }
}
