/**
 * An endpoint the emulated supervisor version did not have yet answers as a route that does not
 * exist: the route stays registered (its plugin is the same at every version), but its schema,
 * its own settings and its handler give way to the not-found handler, so a key is asked for and
 * the 404 body is the one any unknown path gets.
 */
import type { FastifyInstance, RouteOptions } from 'fastify';
import type { SupervisorApi } from '../versions.js';

export function installVersionGate(app: FastifyInstance, api: SupervisorApi): void {
  if (!api.emulated) return;
  app.addHook('onRoute', (route: RouteOptions) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (methods.every((m) => api.hasRoute(m, route.url ?? ''))) return;
    delete route.schema;
    delete route.config;
    route.handler = (_request, reply) => reply.callNotFound();
  });
}
