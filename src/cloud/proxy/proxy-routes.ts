/**
 * `POST /supervisor/*`: a user's call to device supervisors. Devices are resolved through the
 * same permission plan as OData reads, so a user reaches only devices they could read.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { FleetlabError } from '../../errors.js';
import { accessOf } from '../auth/permissions.js';
import type { Principal } from '../auth/principal.js';
import type { Db } from '../db/port.js';
import type { Model } from '../model/types.js';
import type { DeviceCalls } from '../cluster/device-calls.js';
import { eqField } from '../odata/expr.js';
import { QueryRunner } from '../odata/execute.js';
import { planSelect } from '../odata/plan.js';
import { ProxyBody, proxyCall, type Selector } from './proxy.js';

export interface ProxyRouteDeps {
  readonly db: Db;
  readonly model: Model;
  readonly devices: DeviceCalls;
  authenticate(request: FastifyRequest): Promise<Principal>;
  readonly timeoutMs: number;
}

export async function proxyRoutes(app: FastifyInstance, deps: ProxyRouteDeps): Promise<void> {
  const runner = new QueryRunner(deps.db, deps.model);

  const devicesOf = (principal: Principal) => async (selector: Selector): Promise<string[]> => {
    const filter =
      'uuid' in selector ? eqField(['uuid'], selector.uuid)
        : 'deviceId' in selector ? eqField(['id'], selector.deviceId)
          : eqField(['belongs_to__application'], selector.appId);
    const plan = planSelect({ model: deps.model, access: accessOf(principal) }, { resource: 'device', count: false, options: { select: ['uuid'], filter } });
    return (await runner.select(plan)).map((r) => String(r.uuid));
  };

  app.post('/supervisor/*', { schema: { body: ProxyBody } }, async (request, reply) => {
    const principal = await deps.authenticate(request);
    if (principal.kind !== 'user') throw new FleetlabError('CLOUD_ERR_FORBIDDEN', 'The supervisor proxy takes a user API key');
    const path = `/${(request.params as { '*': string })['*']}`;
    const result = await proxyCall({ devices: deps.devices, resolve: devicesOf(principal), timeoutMs: deps.timeoutMs }, path, request.body as ProxyBody);
    return reply.code(result.status).type(result.contentType ?? 'text/plain; charset=utf-8').send(result.body);
  });
}
