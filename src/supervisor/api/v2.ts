/**
 * v2 endpoints: application state and actions, engine status, and the information and
 * utility endpoints (version, container ids, device name/tags/vpn, volume cleanup, journal).
 */
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify';
import { FleetlabError, notFound } from '../../errors.js';
import type { JournalQuery } from '../adapters/ports.js';
import { readDeviceConfig } from '../state/device-config.js';
import type { SupervisorContext } from './context.js';
import { AppIdParams, ForceBody } from './v1.js';

const ServiceBody = Type.Object({
  serviceName: Type.Optional(Type.String({ minLength: 1 })),
  imageId: Type.Optional(Type.Integer({ minimum: 1 })),
  force: Type.Optional(Type.Boolean()),
});
type ServiceBody = { serviceName?: string; imageId?: number; force?: boolean };

const notDash = { pattern: '^[^-]', maxLength: 256 };
const JournalBody = Type.Object({
    all: Type.Optional(Type.Boolean()),
    follow: Type.Optional(Type.Boolean()),
    count: Type.Optional(Type.Integer({ minimum: 1 })),
    unit: Type.Optional(Type.String(notDash)),
    containerId: Type.Optional(Type.String(notDash)),
    format: Type.Optional(Type.String({ minLength: 1 })),
    since: Type.Optional(Type.String(notDash)),
    until: Type.Optional(Type.String(notDash)),
});

const appIdOf = (req: FastifyRequest) => Number((req.params as { appId: string }).appId);

export function v2Routes(sup: SupervisorContext): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    app.get('/v2/applications/state', async (req) => {
      const view = await sup.state.view();
      const scoped = req.identity?.kind === 'app' ? req.identity.appId : undefined;
      const result: Record<string, unknown> = {};
      for (const target of sup.state.getTarget().apps) {
        if (scoped !== undefined && target.appId !== scoped) continue;
        const services: Record<string, unknown> = {};
        for (const s of view.services.filter((s) => s.appId === target.appId)) {
          services[s.serviceName] = { status: s.status, releaseId: s.releaseId, downloadProgress: s.downloadProgress };
        }
        result[target.name] = { appId: target.appId, commit: view.commits.get(target.appId) ?? target.commit, services };
      }
      return result;
    });

    app.get('/v2/applications/:appId/state', { schema: { params: AppIdParams } }, async (req) => {
      const appId = appIdOf(req);
      const target = sup.actions.app(appId);
      const view = await sup.state.view();
      const services: Record<string, unknown> = {};
      for (const s of view.services.filter((s) => s.appId === appId)) {
        services[String(s.serviceId)] = { status: s.status, releaseId: s.releaseId, download_progress: s.downloadProgress };
      }
      return { local: { [String(appId)]: { services } }, commit: view.commits.get(appId) ?? target.commit };
    });

    app.get('/v2/state/status', async (req) => {
      const view = await sup.state.view();
      const scoped = req.identity?.kind === 'app' ? req.identity.appId : undefined;
      const mine = <T extends { appId: number }>(items: T[]) => (scoped === undefined ? items : items.filter((i) => i.appId === scoped));
      const release = sup.state.getTarget().apps.find((a) => scoped === undefined || a.appId === scoped);
      return {
        status: 'success',
        appState: view.appState,
        overallDownloadProgress: view.downloadProgress,
        containers: mine(view.containers),
        images: mine(view.images).map((i) => ({ ...i, dockerImageId: i.engineImageId })),
        release: release ? String(release.releaseId) : '',
      };
    });

    app.post('/v2/applications/:appId/restart-service', { schema: { params: AppIdParams, body: ServiceBody } }, async (req, reply) => {
      const body = req.body as ServiceBody;
      await sup.actions.restartService(appIdOf(req), body, body.force ?? false);
      return reply.type('text/plain').send('OK');
    });

    app.post('/v2/applications/:appId/stop-service', { schema: { params: AppIdParams, body: ServiceBody } }, async (req, reply) => {
      const body = req.body as ServiceBody;
      await sup.actions.stopService(appIdOf(req), body, body.force ?? false);
      return reply.type('text/plain').send('OK');
    });

    app.post('/v2/applications/:appId/start-service', { schema: { params: AppIdParams, body: ServiceBody } }, async (req, reply) => {
      await sup.actions.startService(appIdOf(req), req.body as ServiceBody);
      return reply.type('text/plain').send('OK');
    });

    app.post('/v2/applications/:appId/restart', { schema: { params: AppIdParams, body: ForceBody } }, async (req, reply) => {
      await sup.actions.restartApp(appIdOf(req), (req.body as { force?: boolean } | undefined)?.force ?? false);
      return reply.type('text/plain').send('OK');
    });

    app.post('/v2/applications/:appId/purge', { schema: { params: AppIdParams, body: ForceBody } }, async (req, reply) => {
      await sup.actions.purge(appIdOf(req), (req.body as { force?: boolean } | undefined)?.force ?? false);
      return reply.type('text/plain').send('OK');
    });

    app.get('/v2/version', async () => ({ status: 'success', version: sup.version }));

    app.get('/v2/containerId', { schema: { querystring: Type.Object({ service: Type.Optional(Type.String({ minLength: 1 })), apikey: Type.Optional(Type.String()) }) } }, async (req) => {
      const { service } = req.query as { service?: string };
      const view = await sup.state.view();
      const scoped = req.identity?.kind === 'app' ? req.identity.appId : undefined;
      const entries = view.services.filter((s) => s.container && (scoped === undefined || s.appId === scoped));
      if (service !== undefined) {
        const found = entries.find((s) => s.serviceName === service);
        if (!found) throw notFound(`No container for service "${service}"`);
        return { status: 'success', containerId: found.container!.id };
      }
      return { status: 'success', services: Object.fromEntries(entries.map((s) => [s.serviceName, s.container!.id])) };
    });

    app.get('/v2/device/name', async () => ({ status: 'success', deviceName: sup.deviceName }));

    app.get('/v2/device/tags', async () => {
      if (!sup.cloud) throw new FleetlabError('SUP_ERR_CLOUD_UNREACHABLE', 'Device tags come from the cloud API, and this device has no cloud connection configured');
      return { status: 'success', tags: await sup.cloud.tags() };
    });

    app.get('/v2/device/vpn', async () => ({
      status: 'success',
      vpn: { enabled: readDeviceConfig(sup.state.getTarget().config).vpnControl, connected: sup.cloud?.tunnelConnected ?? false },
    }));

    app.get('/v2/cleanup-volumes', async () => {
      const snapshot = await sup.engine.snapshot();
      const declared = new Set(sup.state.getTarget().apps.flatMap((a) => a.volumes.map((v) => `${a.appId}/${v}`)));
      for (const volume of snapshot.volumes) {
        if (declared.has(`${volume.appId}/${volume.volume}`)) continue;
        // A volume still mounted by a container is referenced: the engine refuses, we keep it.
        if (await sup.engine.removeVolume(volume.name)) sup.log.info(`Removed unreferenced volume ${volume.name}`);
      }
      return { status: 'success' };
    });

    app.post('/v2/journal-logs', { schema: { body: JournalBody } }, async (req, reply) => {
      const query = (req.body ?? {}) as JournalQuery;
      await sup.journal.check(query);
      const abort = new AbortController();
      const stream = sup.journal.stream(query, abort.signal);
      reply.raw.once('close', () => abort.abort());
      return reply.type('text/plain; charset=utf-8').send(stream);
    });
  };
}
