/**
 * v2 endpoints: application state and actions, engine status, and the information and
 * utility endpoints (version, container ids, device name/tags/vpn, volume cleanup, journal).
 */
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify';
import { FleetlabError, notFound } from '../../errors.js';
import type { ApplicationsState, AppStateV2, StateStatus } from '../../protocol/device-api.js';
import type { JournalQuery } from '../adapters/ports.js';
import type { SupervisorContext } from './context.js';
import { callerOf, readsFor } from './reads.js';
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

/**
 * A route's body fields that the emulated supervisor version did not read yet: dropped before
 * validation, so they are ignored as any field a route does not know is.
 */
function dropUntaken(fields: readonly string[]): (req: FastifyRequest) => Promise<void> {
  return async (req) => {
    const body = req.body;
    if (body && typeof body === 'object' && !Array.isArray(body)) for (const f of fields) delete (body as Record<string, unknown>)[f];
  };
}

export function v2Routes(sup: SupervisorContext): FastifyPluginAsync {
  const api = sup.supervisorApi;
  // Before 8.2.2 a service is named by imageId only; journal options as they arrived (10.3, 14.7.0).
  const serviceFields = dropUntaken(api.has('serviceName') ? [] : ['serviceName']);
  const journalFields = dropUntaken([...(api.has('journalFormat') ? [] : ['format']), ...(api.has('journalSinceUntil') ? [] : ['since', 'until'])]);
  return async (app: FastifyInstance) => {
    app.get('/v2/applications/state', async (req): Promise<ApplicationsState> => {
      const reads = readsFor(sup, callerOf(req));
      const view = await reads.view();
      const result: ApplicationsState = {};
      for (const target of reads.apps()) {
        const services: ApplicationsState[string]['services'] = {};
        for (const s of view.services.filter((s) => s.appId === target.appId)) {
          services[s.serviceName] = { status: s.status, releaseId: s.releaseId, downloadProgress: s.downloadProgress, ...(s.health ? { health: s.health } : {}) };
        }
        result[target.name] = { appId: target.appId, commit: view.commits.get(target.appId) ?? target.commit, services };
      }
      return result;
    });

    app.get('/v2/applications/:appId/state', { schema: { params: AppIdParams } }, async (req): Promise<AppStateV2> => {
      const appId = appIdOf(req);
      const reads = readsFor(sup, callerOf(req));
      const target = reads.app(appId);
      const view = await reads.view();
      const services: AppStateV2['local'][string]['services'] = {};
      for (const s of view.services.filter((s) => s.appId === appId)) {
        services[String(s.serviceId)] = { status: s.status, releaseId: s.releaseId, download_progress: s.downloadProgress, ...(s.health ? { health: s.health } : {}) };
      }
      return { local: { [String(appId)]: { services } }, commit: view.commits.get(appId) ?? target.commit };
    });

    app.get('/v2/state/status', async (req): Promise<StateStatus> => {
      const reads = readsFor(sup, callerOf(req));
      const view = await reads.view();
      const release = reads.apps()[0];
      return {
        status: 'success',
        appState: view.appState,
        overallDownloadProgress: view.downloadProgress,
        containers: view.containers,
        images: view.images.map((i) => ({ ...i, dockerImageId: i.engineImageId })),
        release: release ? String(release.releaseId) : '',
      };
    });

    app.post('/v2/applications/:appId/restart-service', { schema: { params: AppIdParams, body: ServiceBody }, preValidation: serviceFields }, async (req, reply) => {
      const body = req.body as ServiceBody;
      await sup.actions.restartService(callerOf(req), appIdOf(req), body, body.force ?? false);
      return reply.type('text/plain').send('OK');
    });

    app.post('/v2/applications/:appId/stop-service', { schema: { params: AppIdParams, body: ServiceBody }, preValidation: serviceFields }, async (req, reply) => {
      const body = req.body as ServiceBody;
      await sup.actions.stopService(callerOf(req), appIdOf(req), body, body.force ?? false);
      return reply.type('text/plain').send('OK');
    });

    app.post('/v2/applications/:appId/start-service', { schema: { params: AppIdParams, body: ServiceBody }, preValidation: serviceFields }, async (req, reply) => {
      await sup.actions.startService(callerOf(req), appIdOf(req), req.body as ServiceBody);
      return reply.type('text/plain').send('OK');
    });

    app.post('/v2/applications/:appId/restart', { schema: { params: AppIdParams, body: ForceBody } }, async (req, reply) => {
      await sup.actions.restartApp(callerOf(req), appIdOf(req), (req.body as { force?: boolean } | undefined)?.force ?? false);
      return reply.type('text/plain').send('OK');
    });

    app.post('/v2/applications/:appId/purge', { schema: { params: AppIdParams, body: ForceBody } }, async (req, reply) => {
      await sup.actions.purge(callerOf(req), appIdOf(req), (req.body as { force?: boolean } | undefined)?.force ?? false);
      return reply.type('text/plain').send('OK');
    });

    app.get('/v2/version', async () => ({ status: 'success', version: sup.version }));

    app.get('/v2/containerId', { schema: { querystring: Type.Object({ service: Type.Optional(Type.String({ minLength: 1 })), apikey: Type.Optional(Type.String()) }) } }, async (req) => {
      const { service } = req.query as { service?: string };
      // A scoped key's services only: another app's service name is as unknown as a typo (404).
      const view = await readsFor(sup, callerOf(req)).view();
      const entries = view.services.filter((s) => s.container);
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
      vpn: { enabled: sup.state.getTarget().settings.vpnControl, connected: sup.cloud?.tunnelConnected ?? false },
    }));

    // A scoped key cleans its own app's volumes only (balena-supervisor's rule too).
    app.get('/v2/cleanup-volumes', async (req) => {
      const reads = readsFor(sup, callerOf(req));
      const snapshot = await reads.snapshot();
      const declared = new Set(reads.apps().flatMap((a) => a.volumes.map((v) => `${a.appId}/${v}`)));
      for (const volume of snapshot.volumes) {
        if (declared.has(`${volume.appId}/${volume.volume}`)) continue;
        // A volume still mounted by a container is referenced: the engine refuses, we keep it.
        if (await sup.engine.removeVolume(volume.name)) sup.log.info(`Removed unreferenced volume ${volume.name}`);
      }
      return { status: 'success' };
    });

    app.post('/v2/journal-logs', { schema: { body: JournalBody }, preValidation: journalFields }, async (req, reply) => {
      const query = (req.body ?? {}) as JournalQuery;
      await sup.journal.check(query);
      const abort = new AbortController();
      reply.raw.once('close', () => abort.abort());
      // A scoped key reads its own app's containers' entries only, never the host's.
      const stream = await readsFor(sup, callerOf(req)).journal(query, abort.signal);
      // fastify sends a stream's head with its first chunk; a follow may wait long for one, and
      // its client should know at once that the request was taken (check() ran the 400s).
      if (query.follow) reply.raw.once('pipe', () => reply.raw.flushHeaders());
      return reply.type('text/plain; charset=utf-8').send(stream);
    });
  };
}
