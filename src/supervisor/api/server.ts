/**
 * The device API as a fastify instance. Each area is a plugin with its own schemas; this
 * file wires body parsing, auth and the one error mapper. It never listens: main does.
 */
import { installJsonBodyParser } from '../../http/json-body.js';
import Fastify, { type FastifyInstance } from 'fastify';
import { lazySchemaCompilers, type LazySchemaCompilers } from '../../http/lazy-schema-compilers.js';
import type { SupervisorContext } from './context.js';
import { installAuth } from './auth.js';
import { frameworkErrorOptions, installErrorHandling } from './errors.js';
import { hostConfigRoutes } from './host-config.js';
import { localRoutes } from './local.js';
import { v1Routes } from './v1.js';
import { v2Routes } from './v2.js';
import { installVersionGate } from './version-gate.js';

/** `schemas` load and compile on each route's first request; a test passes its own to compile them all. */
export function buildApi(sup: SupervisorContext, schemas: LazySchemaCompilers = lazySchemaCompilers()): FastifyInstance {
  const app = Fastify({
    logger: false,
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
    schemaController: { compilersFactory: schemas.compilersFactory },
    // Journal follow streams stay open; the server's close must not wait on them forever.
    forceCloseConnections: true,
    // A Host header names nothing here (one device, one API), and node's own refusal of a
    // request without one is a 400 with an empty body instead of the API's error body.
    http: { requireHostHeader: false },
    ...frameworkErrorOptions,
  });

  schemas.loadOnRequest(app);
  installJsonBodyParser(app);

  // An action called with no body at all validates as `{}`, so optional-body schemas hold.
  app.addHook('preValidation', async (request) => {
    if (request.body == null && request.method !== 'GET') request.body = {};
  });
  installErrorHandling(app);
  // Before any route: it decides, as each is registered, whether the emulated version has it.
  installVersionGate(app, sup.supervisorApi);
  installAuth(app, { keys: sup.keys, localMode: () => sup.localMode() });
  app.get('/ping', { config: { auth: 'open' } }, async (_req, reply) => reply.type('text/plain').send('OK'));
  void app.register(v1Routes(sup));
  void app.register(hostConfigRoutes(sup));
  void app.register(v2Routes(sup));
  void app.register(localRoutes(sup));
  return app;
}
