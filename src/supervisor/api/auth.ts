/**
 * API key checks (DECISIONS.md items 2-3). The key comes as `?apikey=` or
 * `Authorization: Bearer`; a scoped key may not name another app. Refusals are always
 * `401 {"status":"failed","message":"Unauthorized"}`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ApiKeys, Identity } from '../state/keys.js';

declare module 'fastify' {
  interface FastifyRequest {
    identity?: Identity;
  }
}

export function keyOf(request: FastifyRequest): string | undefined {
  const query = request.query as Record<string, unknown> | undefined;
  if (typeof query?.apikey === 'string' && query.apikey) return query.apikey;
  const header = request.headers.authorization;
  const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  return match?.[1];
}

const refuse = (reply: FastifyReply) => reply.code(401).send({ status: 'failed', message: 'Unauthorized' });

/** The app a request names, in its path or body. */
function namedApp(request: FastifyRequest): number | undefined {
  const params = request.params as Record<string, unknown> | undefined;
  const body = request.body as Record<string, unknown> | undefined;
  const raw = params?.appId ?? (body && typeof body === 'object' ? body.appId : undefined);
  return raw === undefined ? undefined : Number(raw);
}

export function installAuth(app: FastifyInstance, deps: { keys: ApiKeys; localMode: () => boolean }): void {
  app.addHook('onRequest', async (request, reply) => {
    const auth = request.routeOptions.config.auth ?? 'key';
    if (auth === 'open') return;
    const identity = deps.keys.identify(keyOf(request));
    if (identity) {
      request.identity = identity;
      return;
    }
    if (auth === 'local' && deps.localMode()) return;
    return refuse(reply);
  });
  // After validation, so a body's appId is known to be a number.
  app.addHook('preHandler', async (request, reply) => {
    const identity = request.identity;
    if (identity?.kind !== 'app') return;
    const appId = namedApp(request);
    if (appId !== undefined && appId !== identity.appId) return refuse(reply);
  });
}
