/**
 * `/v1` .. `/v6` OData routes: authenticate, parse, translate an old version, plan with
 * the caller's permissions, run, and answer in the envelope of docs/decisions.md items 16-17.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/principal.js';
import { accessForRequest } from '../auth/permissions.js';
import type { Db } from '../db/port.js';
import type { InsertHooks } from '../model/hooks.js';
import type { Model } from '../model/types.js';
import { VersionTranslator, versionTables } from '../model/versions.js';
import { QueryRunner } from '../odata/execute.js';
import { badRequest, ODataUrlParser, type ParsedRequest } from '../odata/parse.js';
import { planSelect, planTarget } from '../odata/plan.js';
import { deleteRecords, insertRecord, updateRecords } from '../odata/write.js';

export interface ODataDeps {
  db: Db;
  model: Model;
  hooks: InsertHooks;
  authenticate(request: FastifyRequest): Promise<Principal>;
}

export async function odataRoutes(app: FastifyInstance, deps: ODataDeps): Promise<void> {
  const { db, model, hooks } = deps;
  const runner = new QueryRunner(db, model);
  const urls = new ODataUrlParser();

  app.route({
    method: ['GET', 'POST', 'PATCH', 'PUT', 'DELETE'],
    url: '/:version/*',
    handler: async (request, reply) => {
      const version = (request.params as { version: string }).version;
      const table = versionTables[version];
      if (!table) return reply.callNotFound();
      const principal = await deps.authenticate(request);
      const rawUrl = request.raw.url ?? request.url;
      const translator = new VersionTranslator(model, table);
      const parsed: ParsedRequest = translator.request(urls.parse(rawUrl.slice(version.length + 1)));
      const access = accessForRequest(principal, parsed.resource);
      const planner = { model, access };

      switch (request.method) {
        case 'GET': {
          const plan = planSelect(planner, parsed);
          if (parsed.count) return { d: await runner.count(plan) };
          const rows = await runner.select(plan);
          const selected = parsed.options.select ? (request.query as Record<string, string>)['$select']?.split(',') : undefined;
          return { d: version === 'v6' ? rows : rows.map((r) => translator.recordDeep(plan, r, selected)) };
        }
        case 'POST': {
          if (parsed.key !== undefined || parsed.count) throw badRequest('POST goes to the collection, without a key');
          if (Object.keys(parsed.options).length) throw badRequest('POST takes no query options');
          if (!model.get(parsed.resource)) throw badRequest(`Unknown resource: ${parsed.resource}`);
          if (model.get(parsed.resource)!.table === 'api_key') throw badRequest('Create API keys with POST /api-key/user/full');
          const body = await deviceTypeBySlug(db, model.get(parsed.resource)!.table, translator.body(parsed.resource, request.body));
          const record = await insertRecord({ db, model, access, hooks }, parsed.resource, body);
          return reply.code(201).send(version === 'v6' ? record : translator.record(parsed.resource, record));
        }
        case 'PATCH':
        case 'PUT':
        case 'DELETE': {
          if (parsed.count) throw badRequest(`${request.method} cannot target $count`);
          const target = planTarget(planner, parsed);
          const ctx = { db, model, access, hooks };
          if (request.method === 'DELETE') await deleteRecords(ctx, target.resource, target.where);
          else await updateRecords(ctx, target.resource, target.where, translator.body(parsed.resource, request.body), request.method === 'PUT');
          return reply.code(200).send();
        }
      }
    },
  });
}

/**
 * v6 clients may create a fleet or device with `device_type: '<slug>'` instead of the link
 * (balena's v6 accepted it; v7 dropped it): the slug becomes the device type's id.
 */
async function deviceTypeBySlug(db: Db, table: string, body: unknown): Promise<unknown> {
  if ((table !== 'application' && table !== 'device') || body === null || typeof body !== 'object' || !('device_type' in body)) return body;
  const { device_type: slug, ...rest } = body as Record<string, unknown>;
  if (typeof slug !== 'string') throw badRequest('device_type must be a device type slug');
  const link = table === 'application' ? 'is_for__device_type' : 'is_of__device_type';
  if (link in rest) throw badRequest(`Give either device_type or ${link}`);
  const rows = await db.query<{ id: number }>('SELECT id FROM "device_type" WHERE slug = ?', [slug]);
  if (!rows[0]) throw badRequest(`Unknown device type ${slug}`);
  return { ...rest, [link]: Number(rows[0].id) };
}
