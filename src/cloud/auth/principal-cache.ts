/**
 * Principals by key, kept between requests so a request with a known key costs no database
 * round trip. Only while someone says when keys change: on PostgreSQL, triggers (migration
 * 007) notify every replica on commit of a change to a key, or to the user, device or fleet
 * a key belongs to, and the replica bus passes it here. Until the bus listens (SQLite, or
 * PostgreSQL while the listener reconnects) every request looks its key up, as before.
 *
 * What can go stale is bounded: a replica's own writes clear it before their answer is sent
 * (`changed()` from the routes), another replica's within a notification's delivery, and a
 * key's expiry is checked on every hit. Unknown keys are never kept: each one costs a lookup.
 */
import type { Db } from '../db/port.js';
import { hashKey } from './keys.js';
import { keyLookup, type Principal } from './principal.js';

/** What the replica bus tells a cache (see ReplicaBus.onKeysChanged). */
export interface KeyChangeListener {
  /** A key, or what one names, changed; or a notification may have been missed. */
  changed(): void;
  /** Whether notifications are being received now. */
  listening(on: boolean): void;
}

export class PrincipalCache implements KeyChangeListener {
  readonly #entries = new Map<string, { principal: Principal; expiresAt: number | null }>();
  /** Bumped by every change: a lookup that began before one must not store what it read. */
  #generation = 0;
  #listening = false;

  constructor(private readonly opts: { db: Db; maxEntries: number }) {}

  changed(): void {
    this.#generation++;
    this.#entries.clear();
  }

  listening(on: boolean): void {
    this.#listening = on;
    this.changed();
  }

  async principal(key: string, now: Date): Promise<Principal> {
    const hash = hashKey(key);
    const hit = this.#entries.get(hash);
    if (hit && (hit.expiresAt === null || hit.expiresAt > now.getTime())) {
      // Least recently used first in the map's order: move this one to the end.
      this.#entries.delete(hash);
      this.#entries.set(hash, hit);
      return hit.principal;
    }
    const generation = this.#generation;
    const found = await keyLookup(this.opts.db, hash, now);
    if (this.#listening && generation === this.#generation) {
      this.#entries.set(hash, found);
      if (this.#entries.size > this.opts.maxEntries) this.#entries.delete(this.#entries.keys().next().value!);
    }
    return found.principal;
  }
}
