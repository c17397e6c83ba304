// pinejs with its Express server over PostgreSQL, serving fleetlab's model (fleetlab.sbvr)
// at /v6: the peer of `npm run bench:cloud -- --peer pinejs`. Started by the bench with
// this directory's own node_modules (installed on demand, see bench/peers/pinejs.ts).
//
//   DATABASE_URL=postgres://... node server.mjs
//
// Prints one JSON line on stdout once it listens:
//   {"event":"ready","url":...,"key":...,"organization":N,"deviceType":N}
// `key` belongs to an ordinary user who is a member of organization N. Its permissions are
// fleetlab's user rules, written as balena writes them for pinejs: a fleet is readable
// through organization membership or when public; devices through membership; what hangs
// off a device through `canAccess()` on it. Writes are the same rules.
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import express from 'express';
// pinejs looks each API key's permissions and actor up on every request unless its user
// turns these caches on, as balena's API does; fleetlab keeps principals by key too
// (src/cloud/auth/principal-cache.ts). The caches are made when pinejs loads, so they are
// configured before it is.
import { cache } from '@balena/pinejs/out/config-loader/env.js';
const keyCache = { max: 10_000, maxAge: 5 * 60_000 };
Object.assign(cache, { apiKeyPermissions: keyCache, apiKeyActorId: keyCache, userPermissions: keyCache });
const pine = await import('@balena/pinejs');

// stdout carries the ready line alone; pinejs tells its progress with console.info.
const out = (line) => process.stdout.write(`${line}\n`);
console.log = console.info = console.error;

const here = dirname(fileURLToPath(import.meta.url));
const { sbvrUtils, permissions, hooks } = pine;
const API = 'v6';

const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl?.startsWith('postgres')) {
  console.error('pinejs peer: set DATABASE_URL=postgres://... (pinejs serves PostgreSQL here)');
  process.exit(2);
}

// The indexes fleetlab's migrations add beyond keys and unique constraints
// (src/cloud/model/migrations.ts), so both answer from the same access paths; pinejs
// itself makes none for links. The bench gives pinejs's sessions fleetlab's planner
// settings too (PGOPTIONS).
const initSql = `
CREATE INDEX IF NOT EXISTS application_organization ON "application" ("organization");
CREATE INDEX IF NOT EXISTS device_application ON "device" ("belongs to-application");
CREATE INDEX IF NOT EXISTS image_service ON "image" ("is a build of-service");
CREATE INDEX IF NOT EXISTS release_image_release ON "image-is part of-release" ("is part of-release");
CREATE INDEX IF NOT EXISTS api_key_actor ON "api key" ("is of-actor");
CREATE INDEX IF NOT EXISTS image_install_device ON "image install" ("device");
CREATE INDEX IF NOT EXISTS device_name_order ON "device" ("device name", "id");
CREATE INDEX IF NOT EXISTS device_tag_key_value_device ON "device tag" ("tag key", "value", "device");
CREATE INDEX IF NOT EXISTS device_id_application ON "device" ("id", "belongs to-application");
`;

const userSbvr = await readFile(join(dirname(createRequire(import.meta.url).resolve('@balena/pinejs')), '..', 'sbvr-api', 'user.sbvr'), 'utf8');
const modelText = `${userSbvr}\n\n${await readFile(join(here, 'fleetlab.sbvr'), 'utf8')}`;

const hex = (bytes) => randomBytes(bytes).toString('hex');
const sudo = (tx) => ({ tx, req: permissions.root });

/** What fleetlab's POST fills in: an actor of its own, and the generated keys. */
async function newActor(tx) {
  const { id } = await sbvrUtils.api.Auth.post({ resource: 'actor', passthrough: sudo(tx), body: {}, options: { returnResource: false } });
  return id;
}
const member = `organization/any(o:o/organization_membership/any(m:m/user/any(u:u/actor eq @__ACTOR_ID)))`;
const deviceRule = `belongs_to__application/any(a:a/${member})`;
const rules = {
  device_type: { read: '' },
  organization: { read: `organization_membership/any(m:m/user/any(u:u/actor eq @__ACTOR_ID))` },
  application: { read: `${member} or is_public eq true`, write: member },
  device: { read: deviceRule, write: deviceRule },
  device_tag: { read: 'device/canAccess()', write: 'device/canAccess()' },
  device_environment_variable: { read: 'device/canAccess()', write: 'device/canAccess()' },
};
const userPermissions = Object.entries(rules).flatMap(([resource, { read, write }]) => [
  `${API}.${resource}.read${read ? `?${read}` : ''}`,
  ...(write ? ['create', 'update', 'delete'].map((action) => `${API}.${resource}.${action}?${write}`) : []),
]);

const app = express();
app.use(express.json());
app.use(permissions.authorizationMiddleware);
// pinejs adds the permissions of a user called guest to every request's; ours has none.
const guest = { username: 'guest', password: hex(16), permissions: [] };
await pine.init(app, { models: [{ modelName: 'fleetlab', modelText, apiRoot: API, initSql }], users: [guest] }, { engine: 'postgres', params: databaseUrl });
// Hooks attach to a model that exists.
hooks.addPureHook('POST', API, 'application', {
  async POSTPARSE({ request, tx }) {
    const v = request.values;
    v.actor = await newActor(tx);
    v.uuid ??= hex(16);
    v.slug ??= `${v.organization}/${v.app_name}`.toLowerCase();
    v.is_of__class ??= 'fleet';
  },
});
hooks.addPureHook('POST', API, 'device', {
  async POSTPARSE({ request, tx }) {
    const v = request.values;
    v.actor = await newActor(tx);
    v.uuid ??= hex(16);
  },
});


/** The bench user: an organization, a user in it, and an API key with the user rules. */
async function benchUser() {
  return sbvrUtils.db.transaction(async (tx) => {
    const auth = sbvrUtils.api.Auth.clone({ passthrough: sudo(tx) });
    const model = sbvrUtils.api[API].clone({ passthrough: sudo(tx) });
    // pinejs gives a new user an actor of its own.
    const username = `bench-${hex(4)}`;
    await auth.post({ resource: 'user', body: { username, password: hex(16) }, options: { returnResource: false } });
    const [user] = await auth.get({ resource: 'user', options: { $select: ['id', 'actor'], $filter: { username } } });
    const actor = user.actor.__id;
    const organization = await model.post({ resource: 'organization', body: { name: 'bench', handle: `bench-${hex(4)}` }, options: { returnResource: false } });
    await model.post({ resource: 'organization_membership', body: { user: user.id, is_member_of__organization: organization.id }, options: { returnResource: false } });
    const deviceType = await model.getOrCreate({ resource: 'device_type', id: { slug: 'raspberrypi4-64' }, body: { name: 'Raspberry Pi 4 (64bit)' }, options: { $select: 'id', returnResource: false } });
    const key = hex(16);
    const apiKey = await auth.post({ resource: 'api_key', body: { key, is_of__actor: actor }, options: { returnResource: false } });
    for (const name of userPermissions) {
      const permission = await auth.getOrCreate({ resource: 'permission', id: { name }, body: {}, options: { $select: 'id', returnResource: false } });
      await auth.post({ resource: 'api_key__has__permission', body: { api_key: apiKey.id, permission: permission.id }, options: { returnResource: false } });
    }
    return { key, organization: organization.id, deviceType: deviceType.id };
  });
}

const bench = await benchUser();
const server = app.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const { port } = server.address();
  out(JSON.stringify({ event: 'ready', url: `http://127.0.0.1:${port}`, ...bench }));
});
const stop = () => server.close(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
