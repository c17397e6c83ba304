/**
 * The cloud API as a fastify instance: the composition root. Everything it uses comes in
 * through `deps`; it never listens (main does) and holds no module-level state.
 */
import { randomBytes } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { bearerKey, type Principal } from './auth/principal.js';
import { PrincipalCache } from './auth/principal-cache.js';
import { cloudFrameworkErrors, installCloudErrors, type CloudErrorLog } from './api/errors.js';
import { keyRoutes } from './api/key-routes.js';
import { odataRoutes } from './api/odata-routes.js';
import type { Db } from './db/port.js';
import { installJsonBodyParser } from '../http/json-body.js';
import { deviceRoutes } from './device/device-routes.js';
import { TargetCache } from './device/target-cache.js';
import { TunnelHub } from './device/tunnel-hub.js';
import { ClusterCalls } from './cluster/device-calls.js';
import type { ReplicaBus } from './cluster/postgres-bus.js';
import { ReplicaDirectory } from './cluster/replica-directory.js';
import { startReplicaHeartbeat, type ReplicaHeartbeat } from './cluster/replica-heartbeat.js';
import { proxyRoutes } from './proxy/proxy-routes.js';
import { buildHooks, type InsertHooks } from './model/hooks.js';
import { buildModel } from './model/resources.js';
import type { Model } from './model/types.js';

export interface CloudDeps {
  db: Db;
  model?: Model;
  hooks?: InsertHooks;
  now?: () => Date;
  /** Where what fails outside a request's answer goes (a tunnel's bookkeeping, the replica heartbeat) and every 5xx answer; silent by default. */
  log?: CloudErrorLog;
  /** How long the proxy waits for a device's answer (docs/decisions.md item 20: then 504). */
  proxyTimeoutMs?: number;
  /** Tunnel heartbeat: a device that misses one is taken offline. */
  tunnelHeartbeatMs?: number;
  /** This process's id among the cloud replicas on the database (lowercase hex; random by default). */
  replicaId?: string;
  /** How other replicas reach this one (PostgreSQL LISTEN/NOTIFY); none on SQLite. Closed with the app. */
  replicaBus?: ReplicaBus | null;
  /** Replica heartbeat; a replica silent for three of these is dead and its devices offline. */
  replicaHeartbeatMs?: number;
  /** Device targets kept built (a few KB each); past this, the least recently polled is rebuilt on its next poll. */
  targetCacheEntries?: number;
  /** API keys whose principal is kept while the replica bus listens; past this, the least recently used is looked up again. */
  principalCacheEntries?: number;
}

export function buildCloud(deps: CloudDeps): FastifyInstance {
  const model = deps.model ?? buildModel();
  const hooks = deps.hooks ?? buildHooks({ now: deps.now });
  const app = Fastify({ logger: false, routerOptions: { maxParamLength: 16_384 }, frameworkErrors: cloudFrameworkErrors });
  const log = deps.log ?? { warn: () => undefined };

  installJsonBodyParser(app);
  installCloudErrors(app, deps.db.dialect, log);

  const principals = new PrincipalCache({ db: deps.db, maxEntries: deps.principalCacheEntries ?? 10_000 });
  deps.replicaBus?.onKeysChanged(principals);
  const authenticate = (request: FastifyRequest): Promise<Principal> =>
    principals.principal(bearerKey(request.headers.authorization), deps.now?.() ?? new Date());
  // This replica's own changes clear the principals before their answer leaves, so a client
  // that revoked a key here never sees it work again; other replicas hear of it on commit.
  // A POST only adds records, and a new record changes no key already known.
  const clearsPrincipals = (scope: FastifyInstance) =>
    scope.addHook('onSend', async (request) => {
      if (request.method === 'PATCH' || request.method === 'PUT' || request.method === 'DELETE') principals.changed();
    });

  const now = deps.now ?? (() => new Date());
  const replicaHeartbeatMs = deps.replicaHeartbeatMs ?? 5_000;
  const directory = new ReplicaDirectory({ db: deps.db, id: deps.replicaId ?? randomBytes(16).toString('hex'), staleAfterMs: 3 * replicaHeartbeatMs });
  const hub = new TunnelHub({
    // Through the kept principals, as every other request: a replica killed mid-rollout sends
    // its devices' tunnels to the others at once, and each was a key lookup of its own.
    authenticate: async (uuid, key) => {
      const p = await principals.principal(key, deps.now?.() ?? new Date());
      return p.kind === 'device' && p.uuid === uuid ? { deviceId: p.deviceId } : null;
    },
    onChange: (uuid, deviceId, online) => (online ? directory.connected(uuid, deviceId, now().toISOString()) : directory.disconnected(uuid, now().toISOString())),
    heartbeatMs: deps.tunnelHeartbeatMs ?? 15_000,
    log,
  });
  hub.attach(app.server);
  const calls = new ClusterCalls({ hub, directory, bus: deps.replicaBus ?? null, log });
  let heartbeat: ReplicaHeartbeat | undefined;
  app.addHook('onReady', async () => {
    heartbeat = await startReplicaHeartbeat({ directory, held: () => hub.held(), intervalMs: replicaHeartbeatMs, now, log });
  });
  app.addHook('onClose', async () => {
    calls.close();
    await hub.close();
    await deps.replicaBus?.close();
    await heartbeat?.stop();
  });

  const targets = new TargetCache({ db: deps.db, maxEntries: deps.targetCacheEntries ?? 20_000 });
  app.get('/ping', async (_req, reply) => reply.type('text/plain').send('OK'));
  void app.register(async (scope) => deviceRoutes(scope, { db: deps.db, authenticate, now, targets }));
  void app.register(async (scope) => proxyRoutes(scope, { db: deps.db, model, devices: calls, authenticate, timeoutMs: deps.proxyTimeoutMs ?? 30_000 }));
  void app.register(async (scope) => {
    clearsPrincipals(scope);
    return keyRoutes(scope, { db: deps.db, model, authenticate, now: deps.now });
  });
  void app.register(async (scope) => {
    clearsPrincipals(scope);
    return odataRoutes(scope, { db: deps.db, model, hooks, authenticate });
  });
  return app;
}
