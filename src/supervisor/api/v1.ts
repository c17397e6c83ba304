/**
 * v1 endpoints: device state, blink, update, reboot/shutdown, purge, restart, key
 * regeneration, health, and the single-container app endpoints.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { FleetlabError, notFound } from '../../errors.js';
import type { AppInfo, DeviceState } from '../../protocol/device-api.js';
import type { TargetApp } from '../../protocol/target-state.js';
import type { SupervisorContext } from './context.js';
import { callerOf, readsFor } from './reads.js';

export const ForceBody = Type.Object({ force: Type.Optional(Type.Boolean()) });
export const AppIdBody = Type.Object({ appId: Type.Integer({ minimum: 1 }), force: Type.Optional(Type.Boolean()) });
export const AppIdParams = Type.Object({ appId: Type.String({ pattern: '^[1-9][0-9]*$' }) });

type Force = { force?: boolean } | undefined;

/** The v1 app endpoints only make sense for an app with one service (docs/device-api.md: else 400). */
function singleService(app: TargetApp) {
  if (app.services.length !== 1) {
    throw new FleetlabError('SUP_ERR_MULTI_CONTAINER', `App ${app.appId} has ${app.services.length} services: v1 app endpoints need exactly one; use the v2 endpoints`);
  }
  return app.services[0]!;
}

export function v1Routes(sup: SupervisorContext): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    app.post('/v1/blink', async (_req, reply) => {
      sup.blinker.blink();
      return reply.code(200).send();
    });

    app.post('/v1/update', { schema: { body: ForceBody } }, async (req, reply) => {
      // With a cloud, "check for updates" is a poll; the poll's new target (if any) applies.
      void sup.cloud?.pollNow();
      sup.state.trigger({ force: (req.body as Force)?.force ?? false });
      return reply.code(204).send();
    });

    for (const [path, action] of [['/v1/reboot', 'reboot'], ['/v1/shutdown', 'poweroff']] as const) {
      app.post(path, { schema: { body: ForceBody }, config: { envelope: 'data-error' } }, async (req, reply) => {
        const force = (req.body as Force)?.force ?? false;
        sup.actions.checkLocks(force);
        reply.raw.once('finish', () => sup.schedulePower(action, force));
        return reply.code(202).send({ Data: 'OK', Error: '' });
      });
    }

    app.post('/v1/purge', { schema: { body: AppIdBody }, config: { envelope: 'data-error' } }, async (req, reply) => {
      const { appId, force } = req.body as { appId: number; force?: boolean };
      await sup.actions.purge(callerOf(req), appId, force ?? false);
      return reply.code(200).send({ Data: 'OK', Error: '' });
    });

    app.post('/v1/restart', { schema: { body: AppIdBody } }, async (req, reply) => {
      const { appId, force } = req.body as { appId: number; force?: boolean };
      await sup.actions.restartApp(callerOf(req), appId, force ?? false);
      return reply.code(200).type('text/plain').send('OK');
    });

    app.post('/v1/regenerate-api-key', async (req, reply) => {
      // The caller's own key only: a scoped key cannot replace the device's or another app's.
      const who = callerOf(req);
      const key = await sup.keys.regenerate(who);
      sup.log.info(`API key regenerated (${who.kind === 'app' ? `app ${who.appId}` : 'device'} key)`);
      return reply.code(200).type('text/plain').send(key);
    });

    // A scoped key gets its own app's commit; the status fields are the device's.
    app.get('/v1/device', async (req): Promise<DeviceState> => {
      const reads = readsFor(sup, callerOf(req));
      const view = await reads.view();
      const { ip, mac } = sup.addresses();
      const firstApp = reads.apps()[0];
      return {
        api_port: sup.config.port,
        commit: firstApp ? view.commits.get(firstApp.appId) ?? firstApp.commit : '',
        ip_address: ip,
        mac_address: mac,
        status: view.status,
        download_progress: view.downloadProgress,
        os_version: sup.osVersion,
        supervisor_version: sup.version,
        update_pending: view.appState === 'applying',
        update_downloaded: view.appState === 'applying' && view.images.every((i) => i.status === 'Downloaded'),
        update_failed: sup.state.updateFailed,
      };
    });

    app.get('/v1/healthy', { config: { auth: 'open' } }, async (_req, reply) => {
      const health = await sup.healthy();
      return health.ok ? reply.code(200).send() : reply.code(500).type('text/plain').send(health.reason ?? 'unhealthy');
    });

    app.get('/v1/apps/:appId', { schema: { params: AppIdParams } }, async (req): Promise<AppInfo> => {
      const appId = Number((req.params as { appId: string }).appId);
      const reads = readsFor(sup, callerOf(req));
      const target = reads.app(appId);
      const service = singleService(target);
      const view = await reads.view();
      const entry = view.services.find((s) => s.appId === appId && s.serviceName === service.serviceName);
      const desired = sup.state.desired().get(`${appId}/${service.serviceName}`);
      return {
        appId,
        commit: view.commits.get(appId) ?? target.commit,
        imageId: service.image,
        containerId: entry?.container?.id ?? '',
        env: desired?.environment ?? {},
      };
    });

    app.post('/v1/apps/:appId/stop', { schema: { params: AppIdParams, body: ForceBody } }, async (req) => {
      const appId = Number((req.params as { appId: string }).appId);
      const service = singleService(sup.actions.app(appId, callerOf(req)));
      const containerId = await sup.actions.stopService(callerOf(req), appId, { serviceName: service.serviceName }, (req.body as Force)?.force ?? false);
      if (!containerId) throw notFound(`Service ${service.serviceName} of app ${appId} has no container`);
      return { containerId };
    });

    app.post('/v1/apps/:appId/start', { schema: { params: AppIdParams } }, async (req) => {
      const appId = Number((req.params as { appId: string }).appId);
      const service = singleService(sup.actions.app(appId, callerOf(req)));
      const containerId = await sup.actions.startService(callerOf(req), appId, { serviceName: service.serviceName });
      if (!containerId) throw notFound(`Service ${service.serviceName} of app ${appId} has no container`);
      return { containerId };
    });
  };
}
