/**
 * What the lab page shows, as data: every board of the lab file with its state (free, leased
 * by whom until when, offline or quarantined with the reason), its last checks, its tests'
 * outcomes over its last runs, the lab's watch, and the latest lease events. Pure: made from what the store answered, at the store's
 * clock, so every host serving the page says the same.
 */
import type { Lab } from './lab-file.js';
import type { Lease, LeaseLogEntry, OfflineBoard, StoredCheck } from './lease-store.js';
import { NO_COUNTS, type BoardCounts } from './flake-attribution.js';
import { WATCH_BOARD } from './lab-watch.js';
import { hideUrlPassword } from '../../src/hide-url-password.js';

export interface CheckView {
  readonly at: number;
  readonly ok: boolean;
  readonly failedStep: string | null;
  readonly reason: string | null;
  readonly by: string;
}

export interface BoardView {
  readonly name: string;
  readonly tags: readonly string[];
  readonly address: string;
  readonly state: 'free' | 'leased' | 'offline' | 'quarantined';
  /** Leased: who, since when, until when (renewed while it runs) and the seconds left. */
  readonly lease?: { readonly holder: string; readonly since: number; readonly until: number; readonly leftSeconds: number };
  /** Offline or quarantined: since when, why, by whom. */
  readonly out?: { readonly since: number; readonly reason: string; readonly by: string };
  /** Newest first. */
  readonly checks: readonly CheckView[];
  /** Its tests' attempts over its last runs (at most the view's `runs`). */
  readonly results: BoardCounts;
}

export interface LabView {
  readonly source: string;
  /** The store, its password hidden. */
  readonly store: string;
  readonly ttlSeconds: number;
  /** The store's clock when read. */
  readonly now: number;
  readonly checksOn: boolean;
  /** How many of each board's last runs `results` counts. */
  readonly runs: number;
  readonly watch?: { readonly holder: string; readonly until: number };
  readonly boards: readonly BoardView[];
  /** The latest lease events, newest first. */
  readonly log: readonly LeaseLogEntry[];
  /** Whether this page was started with an admin key (online, release). */
  readonly admin: boolean;
}

export interface StoreRead {
  readonly now: number;
  readonly leases: ReadonlyMap<string, Lease>;
  readonly out: ReadonlyMap<string, OfflineBoard>;
  readonly checks: ReadonlyMap<string, readonly StoredCheck[]>;
  readonly counts: ReadonlyMap<string, BoardCounts>;
  readonly log: readonly LeaseLogEntry[];
}

export function labView(lab: Lab, read: StoreRead, admin: boolean): LabView {
  const watch = read.leases.get(WATCH_BOARD);
  return {
    source: lab.source,
    store: hideUrlPassword(lab.store),
    ttlSeconds: lab.ttlSeconds,
    now: read.now,
    checksOn: lab.health !== undefined,
    runs: lab.flakes.runs,
    ...(watch ? { watch: { holder: watch.holder, until: watch.expiresAt } } : {}),
    admin,
    log: read.log,
    boards: lab.boards.map((b): BoardView => {
      const lease = read.leases.get(b.name);
      const out = read.out.get(b.name);
      const checks = (read.checks.get(b.name) ?? []).map((c) => ({ at: c.at, ok: c.ok, failedStep: c.failedStep, reason: c.reason, by: c.checkedBy }));
      const base = { name: b.name, tags: b.tags, address: `${b.config.host}:${b.config.sshPort}`, checks, results: read.counts.get(b.name) ?? NO_COUNTS };
      // Out of the lab first: a board's lease ends when it is taken out, so both is a moment's race.
      if (out) return { ...base, state: out.kind, out: { since: out.since, reason: out.reason, by: out.markedBy } };
      if (lease) return { ...base, state: 'leased', lease: { holder: lease.holder, since: lease.acquiredAt, until: lease.expiresAt, leftSeconds: Math.max(0, Math.round((lease.expiresAt - read.now) / 1000)) } };
      return { ...base, state: 'free' };
    }),
  };
}
