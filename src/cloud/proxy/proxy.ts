/**
 * `POST /supervisor/<path>` (docs/decisions.md item 20): forwards one device API call through the
 * device tunnels. One device selected: its status and body pass through. A fleet selected:
 * 207 with one entry per online device. No online device matched: 404. Timeout: 504.
 */
import { Type, type Static } from '@sinclair/typebox';
import { FleetlabError } from '../../errors.js';
import type { DeviceCalls } from '../cluster/device-calls.js';
import type { DeviceAnswer } from '../device/tunnel-hub.js';

export const ProxyBody = Type.Object(
  {
    uuid: Type.Optional(Type.String({ minLength: 1, maxLength: 62 })),
    deviceId: Type.Optional(Type.Integer({ minimum: 1 })),
    appId: Type.Optional(Type.Integer({ minimum: 1 })),
    method: Type.Optional(Type.Union(['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].map((m) => Type.Literal(m)))),
    data: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);
export type ProxyBody = Static<typeof ProxyBody>;

export type Selector = { uuid: string } | { deviceId: number } | { appId: number };

/** Resolves a selector to the uuids of devices the caller may reach (permission-filtered). */
export type DeviceResolver = (selector: Selector) => Promise<string[]>;

export interface ProxyResult {
  status: number;
  contentType?: string;
  body: string;
}

export function selectorOf(body: ProxyBody): Selector {
  const given = (['uuid', 'deviceId', 'appId'] as const).filter((k) => body[k] !== undefined);
  if (given.length !== 1) {
    throw new FleetlabError('CLOUD_ERR_BAD_REQUEST', `give exactly one of uuid, deviceId, appId (got ${given.length ? given.join(', ') : 'none'})`);
  }
  if (body.uuid !== undefined) return { uuid: body.uuid };
  if (body.deviceId !== undefined) return { deviceId: body.deviceId };
  return { appId: body.appId! };
}

const parsedBody = (a: DeviceAnswer): unknown => {
  if (a.contentType?.startsWith('application/json')) {
    try {
      return JSON.parse(a.body);
    } catch {
      return a.body;
    }
  }
  return a.body;
};

export interface ProxyDeps {
  readonly devices: DeviceCalls;
  readonly resolve: DeviceResolver;
  readonly timeoutMs: number;
}

export async function proxyCall(deps: ProxyDeps, path: string, body: ProxyBody): Promise<ProxyResult> {
  if (!/^\/(ping|v1\/|v2\/)/.test(path)) throw new FleetlabError('CLOUD_ERR_BAD_REQUEST', `${path} is not a supervisor API path`);
  const selector = selectorOf(body);
  const request = { method: body.method ?? 'POST', path, ...(body.data === undefined ? {} : { body: body.data }) } as const;
  const online = await deps.devices.reachable(await deps.resolve(selector));
  if (online.length === 0) throw new FleetlabError('CLOUD_ERR_DEVICE_OFFLINE', 'No online device matched the request');
  if (!('appId' in selector)) {
    const answer = await deps.devices.call(online[0]!, request, deps.timeoutMs);
    return { status: answer.status, body: answer.body, ...(answer.contentType ? { contentType: answer.contentType } : {}) };
  }
  const results = await Promise.all(
    online.map(async (uuid) => {
      try {
        const answer = await deps.devices.call(uuid, request, deps.timeoutMs);
        return { uuid, statusCode: answer.status, body: parsedBody(answer) };
      } catch (err) {
        const status = err instanceof FleetlabError ? err.statusCode : 502;
        return { uuid, statusCode: status, body: err instanceof Error ? err.message : String(err) };
      }
    }),
  );
  return { status: 207, contentType: 'application/json', body: JSON.stringify(results) };
}
