/**
 * Messages between cloud replicas through PostgreSQL's LISTEN/NOTIFY: each replica listens
 * on its own channel, `fleetlab_replica_<id>`, on one dedicated connection. A notification
 * payload is capped at 8000 bytes, so a larger message (a device's answer with a big body)
 * is stored as a `cloud_message` row and the notification carries only its id; the reader
 * deletes the row as it takes it. Delivery is at most once: a message sent while the
 * listener is reconnecting is lost, and the asker meets its timeout (504), as with a device
 * that does not answer.
 *
 * The same connection listens on KEYS_CHANNEL, which migration 007's triggers notify when an
 * API key, or the user, device or fleet one names, changes: the principal cache's signal.
 */
import pg from 'pg';
import type { KeyChangeListener } from '../auth/principal-cache.js';
import type { Db } from '../db/port.js';
import { KEYS_CHANNEL } from '../model/migrations.js';

export interface ReplicaBus {
  /** Sends one JSON message to a replica. */
  send(replica: string, message: unknown): Promise<void>;
  /** Where this replica's messages go; set once by their consumer. */
  listen(handler: (message: unknown) => void): void;
  /** Who hears of key changes, and of the listener's connection coming and going; set once. */
  onKeysChanged(listener: KeyChangeListener): void;
  close(): Promise<void>;
}

export interface PostgresBusOptions {
  readonly connectionString: string;
  readonly db: Db;
  /** This replica's id (lowercase hex). */
  readonly replica: string;
  readonly log: { warn(message: string): void };
}

/** Largest payload sent inline, below PostgreSQL's 8000-byte notification limit. */
const INLINE_LIMIT = 7_900;
const RECONNECT_MS = 1_000;

export const channelOf = (replica: string): string => `fleetlab_replica_${replica}`;

export async function startPostgresBus(opts: PostgresBusOptions): Promise<ReplicaBus> {
  if (!/^[0-9a-f]{1,40}$/.test(opts.replica)) throw new Error(`replica id must be lowercase hex, got ${opts.replica}`);
  let handler: (message: unknown) => void = () => undefined;
  let keys: KeyChangeListener | undefined;
  let keysHeard = false;
  let client: pg.Client | null = null;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;

  const deliver = async (payload: string): Promise<void> => {
    const ref = /^\{"ref":(\d+)\}$/.exec(payload)?.[1];
    let text: string | undefined = payload;
    if (ref) {
      const rows = await opts.db.query<{ payload: string }>('DELETE FROM "cloud_message" WHERE id = ? RETURNING payload', [Number(ref)]);
      text = rows[0]?.payload;
    }
    if (text === undefined) return;
    handler(JSON.parse(text));
  };

  const connect = async (): Promise<void> => {
    const c = new pg.Client({ connectionString: opts.connectionString });
    c.on('notification', (n) => {
      if (n.channel === KEYS_CHANNEL) return keys?.changed();
      if (n.payload !== undefined) deliver(n.payload).catch((err) => opts.log.warn(`replica message dropped: ${String(err)}`));
    });
    const lost = (why: string) => {
      if (closed || client !== c) return;
      client = null;
      keysHeard = false;
      keys?.listening(false);
      opts.log.warn(`replica bus: listener connection lost (${why}); reconnecting`);
      c.end().catch(() => undefined);
      retry = setTimeout(() => void connect().catch((err) => lost(String(err))), RECONNECT_MS);
    };
    c.on('error', (err) => lost(err.message));
    c.on('end', () => lost('closed by the server'));
    client = c;
    await c.connect();
    await c.query(`LISTEN "${channelOf(opts.replica)}"`);
    await c.query(`LISTEN "${KEYS_CHANNEL}"`);
    // Whatever changed while no one listened is unknown: listening(true) clears the cache.
    if (client !== c) return;
    keysHeard = true;
    keys?.listening(true);
  };
  await connect();

  return {
    async send(replica, message) {
      const text = JSON.stringify(message);
      let payload = text;
      if (Buffer.byteLength(text) > INLINE_LIMIT) {
        const rows = await opts.db.query<{ id: number }>('INSERT INTO "cloud_message" (replica, payload) VALUES (?, ?) RETURNING id', [replica, text]);
        payload = JSON.stringify({ ref: Number(rows[0]!.id) });
      }
      await opts.db.query('SELECT pg_notify(?, ?)', [channelOf(replica), payload]);
    },
    listen(h) {
      handler = h;
    },
    onKeysChanged(listener) {
      keys = listener;
      listener.listening(keysHeard);
    },
    async close() {
      closed = true;
      keys?.listening(false);
      clearTimeout(retry);
      await client?.end().catch(() => undefined);
    },
  };
}
