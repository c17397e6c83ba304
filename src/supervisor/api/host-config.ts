/**
 * GET and PATCH /v1/device/host-config (docs/device-api.md "Host config" rules 1-6,
 * docs/decisions.md items 8-10): hostname through hostname1, proxy as redsocks
 * configuration, both through the host adapter. An
 * absent field is left unchanged; null, "" or {} resets it.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { badRequest } from '../../errors.js';
import { isValidHostname } from '../adapters/hostname-rules.js';
import type { ProxySettings } from '../adapters/ports.js';
import type { SupervisorContext } from './context.js';

const Proxy = Type.Object(
  {
    type: Type.Optional(Type.Union([Type.Literal('socks4'), Type.Literal('socks5'), Type.Literal('http-connect'), Type.Literal('http-relay')])),
    ip: Type.Optional(Type.String({ minLength: 1, maxLength: 253, pattern: '^[A-Za-z0-9.:_-]+$' })),
    port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    login: Type.Optional(Type.String({ maxLength: 255, pattern: '^[^"\\\\;{}\\r\\n]*$' })),
    password: Type.Optional(Type.String({ maxLength: 255, pattern: '^[^"\\\\;{}\\r\\n]*$' })),
    noProxy: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9.:/_-]+$' }))),
  },
  { additionalProperties: false },
);

export const HostConfigBody = Type.Object({
  network: Type.Optional(
    Type.Object({
      hostname: Type.Optional(Type.Union([Type.Null(), Type.String({ maxLength: 64 })])),
      proxy: Type.Optional(Type.Union([Type.Null(), Proxy])),
      force: Type.Optional(Type.Boolean()),
    }),
  ),
  force: Type.Optional(Type.Boolean()),
});
type HostConfigBody = Static<typeof HostConfigBody>;

function proxyFrom(p: Static<typeof Proxy>): ProxySettings | undefined {
  if (Object.keys(p).length === 0) return undefined;
  for (const field of ['type', 'ip', 'port'] as const) {
    if (p[field] === undefined) throw badRequest(`body/network/proxy/${field} is required when a proxy is set`);
  }
  return { type: p.type!, ip: p.ip!, port: p.port!, login: p.login, password: p.password, noProxy: p.noProxy };
}

export function hostConfigRoutes(sup: SupervisorContext): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    app.get('/v1/device/host-config', async () => {
      const [hostname, proxy] = await Promise.all([sup.host.getHostname(), sup.host.getProxy()]);
      return {
        network: {
          hostname,
          ...(proxy
            ? {
                proxy: {
                  type: proxy.type,
                  ip: proxy.ip,
                  port: String(proxy.port),
                  ...(proxy.login ? { login: proxy.login } : {}),
                  ...(proxy.noProxy?.length ? { noProxy: proxy.noProxy } : {}),
                },
              }
            : {}),
        },
      };
    });

    app.patch('/v1/device/host-config', { schema: { body: HostConfigBody } }, async (req, reply) => {
      const body = (req.body ?? {}) as HostConfigBody;
      const network = body.network ?? {};
      const force = body.force ?? network.force ?? false;
      let hostname: string | undefined;
      if (network.hostname !== undefined) {
        hostname = network.hostname === null || network.hostname === '' ? sup.uuid.slice(0, 7) : network.hostname;
        if (!isValidHostname(hostname)) throw badRequest(`body/network/hostname "${hostname}" is not a valid host name (letters, digits and -, at most 64 characters)`);
      }
      const proxy = network.proxy === undefined ? undefined : { value: network.proxy === null ? undefined : proxyFrom(network.proxy) };
      // From 12.11.34 (the spec's Versioning table); an older supervisor changed the host under a lock.
      if (sup.supervisorApi.has('hostConfigLocks')) sup.actions.checkLocks(force);
      if (hostname !== undefined) {
        await sup.host.setHostname(hostname);
        sup.log.info(`Hostname set to ${hostname}`);
      }
      if (proxy) {
        await sup.host.setProxy(proxy.value);
        sup.log.info(proxy.value ? `Proxy set to ${proxy.value.type} ${proxy.value.ip}:${proxy.value.port}` : 'Proxy removed');
      }
      return reply.code(200).type('text/plain').send('OK');
    });
  };
}
