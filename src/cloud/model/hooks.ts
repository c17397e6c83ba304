/**
 * Values the server fills in on create and update: timestamps, actors, uuids, a fleet's
 * slug, a device's name and type. Randomness and time come in as dependencies so tests
 * and benches can pin them.
 */
import { randomBytes } from 'node:crypto';
import type { Db, SqlValue } from '../db/port.js';
import type { ResourceDef } from './types.js';

export interface InsertHooks {
  beforeInsert(tx: Db, resource: ResourceDef, values: Map<string, SqlValue>): Promise<void>;
  beforeUpdate(resource: ResourceDef, values: Map<string, SqlValue>): void;
}

export interface HookDeps {
  now?: () => Date;
  uuid?: () => string;
}

export const newActor = async (tx: Db, now: string): Promise<number> =>
  Number((await tx.query<{ id: number }>('INSERT INTO "actor" (created_at) VALUES (?) RETURNING id', [now]))[0]!.id);

export function buildHooks(deps: HookDeps = {}): InsertHooks {
  const now = deps.now ?? (() => new Date());
  const uuid = deps.uuid ?? (() => randomBytes(16).toString('hex'));
  return {
    async beforeInsert(tx, resource, values) {
      const at = now().toISOString();
      values.set('created_at', at);
      const table = resource.table;
      if (table === 'user' || table === 'application' || table === 'device') values.set('actor', await newActor(tx, at));
      if (table === 'application') {
        if (!values.has('uuid')) values.set('uuid', uuid());
        if (!values.has('slug')) {
          const org = await tx.query<{ handle: string }>('SELECT handle FROM "organization" WHERE id = ?', [values.get('organization') ?? null]);
          values.set('slug', `${org[0]?.handle ?? 'fleet'}/${String(values.get('app_name'))}`.toLowerCase());
        }
      }
      if (table === 'device') {
        if (!values.has('uuid')) values.set('uuid', uuid());
        if (!values.get('device_name')) values.set('device_name', String(values.get('uuid')).slice(0, 7));
        values.set('modified_at', at);
        if (values.get('is_of__device_type') == null && values.get('belongs_to__application') != null) {
          const app = await tx.query<{ t: number }>('SELECT is_for__device_type AS t FROM "application" WHERE id = ?', [values.get('belongs_to__application')!]);
          if (app[0]) values.set('is_of__device_type', Number(app[0].t));
        }
      }
    },
    beforeUpdate(resource, values) {
      if (resource.table === 'device') values.set('modified_at', now().toISOString());
    },
  };
}
