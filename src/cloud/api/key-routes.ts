/**
 * Key-issuing endpoints the reference's clients call (balena-sdk `models.apiKey.create`,
 * `models.application.generateProvisioningKey`, `models.device.generateDeviceKey`), plus
 * fleetlab's admin-only user creation. Each answers the new key once, as a JSON string;
 * only its hash is stored.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { FleetlabError } from '../../errors.js';
import { newApiKey, storeApiKey } from '../auth/keys.js';
import { accessOf } from '../auth/permissions.js';
import type { Principal } from '../auth/principal.js';
import type { Db } from '../db/port.js';
import { newActor } from '../model/hooks.js';
import type { Model } from '../model/types.js';
import { QueryRunner } from '../odata/execute.js';
import { badRequest } from '../odata/parse.js';
import { planById } from '../odata/plan.js';

export interface KeyDeps {
  db: Db;
  model: Model;
  authenticate(request: FastifyRequest): Promise<Principal>;
  now?: () => Date;
}

const text = (v: unknown, name: string, optional = true): string | null => {
  if (v === undefined || v === null) {
    if (optional) return null;
    throw badRequest(`${name} is required`);
  }
  if (typeof v !== 'string' || v.length > 200) throw badRequest(`${name} must be a string`);
  return v;
};

export async function keyRoutes(app: FastifyInstance, deps: KeyDeps): Promise<void> {
  const { db, model } = deps;
  const now = deps.now ?? (() => new Date());
  const runner = new QueryRunner(db, model);
  const body = (r: FastifyRequest) => (r.body ?? {}) as Record<string, unknown>;

  /** The record's actor, if the caller may change that record. */
  async function writableActor(p: Principal, resource: 'application' | 'device', id: number): Promise<number> {
    const ids = await runner.ids(planById({ model, access: accessOf(p) }, resource, id, 'write'));
    if (ids.length === 0) throw new FleetlabError('CLOUD_ERR_FORBIDDEN', `No ${resource} ${id} you may manage`);
    const rows = await db.query<{ actor: number }>(`SELECT actor FROM "${resource}" WHERE id = ?`, [id]);
    return Number(rows[0]!.actor);
  }

  const idParam = (r: FastifyRequest) => {
    const id = Number((r.params as { id: string }).id);
    if (!Number.isSafeInteger(id) || id < 1) throw badRequest('The id must be a positive integer');
    return id;
  };

  app.post('/api-key/user/full', async (request) => {
    const p = await deps.authenticate(request);
    if (p.kind !== 'user') throw new FleetlabError('CLOUD_ERR_FORBIDDEN', 'Only a user can create a user API key');
    const b = body(request);
    const key = newApiKey();
    await storeApiKey(db, p.actor, key, { name: text(b.name, 'name', false), description: text(b.description, 'description'), now: now() });
    return JSON.stringify(key);
  });

  app.post('/api-key/application/:id/provisioning', async (request) => {
    const p = await deps.authenticate(request);
    const actor = await writableActor(p, 'application', idParam(request));
    const b = body(request);
    const key = newApiKey();
    await storeApiKey(db, actor, key, { name: text(b.name, 'name'), description: text(b.description, 'description'), now: now() });
    return JSON.stringify(key);
  });

  app.post('/api-key/device/:id/device-key', async (request) => {
    const p = await deps.authenticate(request);
    const actor = await writableActor(p, 'device', idParam(request));
    // A registering device chooses its own key and sends it (balena's register flow).
    const given = text(body(request).apiKey, 'apiKey');
    if (given !== null && !/^[\x21-\x7e]{16,200}$/.test(given)) throw badRequest('apiKey: 16 to 200 printable characters');
    const key = given ?? newApiKey();
    await storeApiKey(db, actor, key, { name: 'device key', now: now() });
    return JSON.stringify(key);
  });

  // fleetlab's own: the operator (admin key) adds users; each gets an organization named after them.
  app.post('/fleetlab/users', async (request, reply) => {
    const p = await deps.authenticate(request);
    if (p.kind !== 'user' || !p.isAdmin) throw new FleetlabError('CLOUD_ERR_FORBIDDEN', 'Only the admin can add users');
    const b = body(request);
    const username = text(b.username, 'username', false)!;
    if (!/^[a-z0-9_][a-z0-9_.-]{0,63}$/i.test(username)) throw badRequest('username: letters, digits, _ . - (at most 64)');
    const created = await createUser(db, { username, email: text(b.email, 'email'), isAdmin: false, now: now() });
    return reply.code(201).send(created);
  });
}

export interface CreatedUser {
  id: number;
  actor: number;
  organization: number;
  apiKey: string;
}

/** A user, their organization (handle = username), membership and one named API key. */
export async function createUser(
  db: Db,
  u: { username: string; email: string | null; isAdmin: boolean; now: Date; key?: string; keyName?: string },
): Promise<CreatedUser> {
  const at = u.now.toISOString();
  const key = u.key ?? newApiKey();
  return db.transaction(async (tx) => {
    const existing = await tx.query('SELECT id FROM "user" WHERE username = ?', [u.username]);
    if (existing.length) throw new FleetlabError('CLOUD_ERR_UNIQUE', '"username" must be unique.');
    const actor = await newActor(tx, at);
    const id = Number((await tx.query<{ id: number }>('INSERT INTO "user" (created_at, actor, username, email, is_admin) VALUES (?, ?, ?, ?, ?) RETURNING id', [at, actor, u.username, u.email, u.isAdmin]))[0]!.id);
    const organization = Number((await tx.query<{ id: number }>('INSERT INTO "organization" (created_at, name, handle) VALUES (?, ?, ?) RETURNING id', [at, u.username, u.username.toLowerCase()]))[0]!.id);
    await tx.query('INSERT INTO "organization_membership" (created_at, "user", is_member_of__organization) VALUES (?, ?, ?)', [at, id, organization]);
    await storeApiKey(tx, actor, key, { name: u.keyName ?? 'fleetlab', now: u.now });
    return { id, actor, organization, apiKey: key };
  });
}
