/**
 * API key checks (docs/decisions.md item 2). The key comes as `?apikey=` or
 * `Authorization: Bearer`; a refusal is `401 {"status":"failed","message":"Unauthorized"}`.
 * This hook only says who is calling; what a key scoped to one app may see or touch is
 * decided where the data is read (state/scope.ts, api/reads.ts, AppActions).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { unauthorized } from '../../errors.js';
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

export function installAuth(app: FastifyInstance, deps: { keys: ApiKeys; localMode: () => boolean }): void {
  app.addHook('onRequest', async (request) => {
    const auth = request.routeOptions.config.auth ?? 'key';
    if (auth === 'open') return;
    const identity = deps.keys.identify(keyOf(request));
    if (identity) {
      request.identity = identity;
      return;
    }
    if (auth === 'local' && deps.localMode()) return;
    throw unauthorized();
  });
}
