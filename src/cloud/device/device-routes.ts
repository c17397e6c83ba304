/**
 * The endpoints devices call: register (provisioning key), target state (device key, ETag),
 * state report (device key). Each device key reaches only its own device.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { FleetlabError } from '../../errors.js';
import { devicePaths, RegisterRequest, StateReportBody } from '../../protocol/device-cloud.js';
import { storeApiKey } from '../auth/keys.js';
import { bearerKey, type Principal } from '../auth/principal.js';
import type { Db } from '../db/port.js';
import { newActor } from '../model/hooks.js';
import { applyReport } from './state-report.js';
import { deviceTargetVersion, type DeviceTargetVersion, type TargetCache } from './target-cache.js';

export interface DeviceRouteDeps {
  readonly db: Db;
  authenticate(request: FastifyRequest): Promise<Principal>;
  readonly now: () => Date;
  readonly targets: TargetCache;
}

function deviceOf(p: Principal): Extract<Principal, { kind: 'device' }> {
  if (p.kind !== 'device') throw new FleetlabError('CLOUD_ERR_FORBIDDEN', 'This endpoint takes a device key');
  return p;
}

export async function deviceRoutes(app: FastifyInstance, deps: DeviceRouteDeps): Promise<void> {
  const { db } = deps;

  app.post(devicePaths.register, { schema: { body: RegisterRequest } }, async (request, reply) => {
    const p = await deps.authenticate(request);
    if (p.kind !== 'provisioning') throw new FleetlabError('CLOUD_ERR_FORBIDDEN', 'Registering a device takes a provisioning key');
    const body = request.body as RegisterRequest;
    const at = deps.now().toISOString();
    const created = await db.transaction(async (tx) => {
      const types = await tx.query<{ id: number }>('SELECT id FROM "device_type" WHERE slug = ?', [body.device_type]);
      if (!types[0]) throw new FleetlabError('CLOUD_ERR_BAD_REQUEST', `Unknown device type "${body.device_type}"`);
      const actor = await newActor(tx, at);
      const name = body.device_name ?? body.uuid.slice(0, 7);
      const rows = await tx.query<{ id: number }>(
        `INSERT INTO "device" (created_at, modified_at, uuid, device_name, actor, belongs_to__application, is_of__device_type, supervisor_version, os_version)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
        [at, at, body.uuid, name, actor, p.applicationId, Number(types[0].id), body.supervisor_version ?? null, body.os_version ?? null],
      );
      await storeApiKey(tx, actor, body.api_key, { name: 'device key', now: deps.now() });
      return { id: Number(rows[0]!.id), uuid: body.uuid, device_name: name, belongs_to__application: p.applicationId };
    });
    return reply.code(201).send(created);
  });

  /** The polling device and its target version in one lookup; any other key gets the general answer (401, 403). */
  const pollingDevice = async (request: FastifyRequest): Promise<DeviceTargetVersion> => {
    const key = bearerKey(request.headers.authorization);
    const found = await deviceTargetVersion(db, key, deps.now());
    if (found) return found;
    deviceOf(await deps.authenticate(request));
    // A device key that the lookup missed was created between the two reads: look again.
    const again = await deviceTargetVersion(db, key, deps.now());
    if (!again) throw new FleetlabError('CLOUD_ERR_UNAUTHORIZED', 'Unauthorized');
    return again;
  };

  app.get('/device/v3/:uuid/state', async (request, reply) => {
    const device = await pollingDevice(request);
    const { uuid } = request.params as { uuid: string };
    if (uuid !== device.uuid) throw new FleetlabError('CLOUD_ERR_FORBIDDEN', 'A device key reads only its own target state');
    const { body, etag } = await deps.targets.target(device);
    reply.header('etag', etag).header('cache-control', 'no-cache');
    if (request.headers['if-none-match'] === etag) return reply.code(304).send();
    return reply.type('application/json').send(body);
  });

  app.patch(devicePaths.report, { schema: { body: StateReportBody } }, async (request, reply) => {
    const p = deviceOf(await deps.authenticate(request));
    const { uuid } = p;
    const body = request.body as StateReportBody;
    const others = Object.keys(body).filter((u) => u !== uuid);
    if (others.length) throw new FleetlabError('CLOUD_ERR_FORBIDDEN', `A device key reports only its own state, not ${others.join(', ')}`);
    if (body[uuid]) await applyReport(db, p.deviceId, body[uuid]!, deps.now());
    return reply.code(200).send();
  });
}
