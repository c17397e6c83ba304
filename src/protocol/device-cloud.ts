/**
 * The wire between a device's supervisor and the cloud: registration, the per-device target
 * state, the state report, and the frames of the WebSocket tunnel the cloud uses to reach the
 * device API. Paths follow the reference platform's device endpoints (`/device/register`,
 * `/device/v3/...`); the target state reuses the local-mode shape (./target-state.ts), so one
 * schema and one normaliser serve both sources.
 */
import { Type, type Static } from '@sinclair/typebox';
import { WireLocalState } from './target-state.js';

export const devicePaths = {
  register: '/device/register',
  targetState: (uuid: string) => `/device/v3/${encodeURIComponent(uuid)}/state`,
  report: '/device/v3/state',
  tunnel: (uuid: string) => `/device/v3/${encodeURIComponent(uuid)}/tunnel`,
} as const;

const uuidPattern = '^[0-9a-f]{32}$|^[0-9a-f]{62}$';

/** `POST /device/register`, authorised with a fleet's provisioning key. */
export const RegisterRequest = Type.Object({
  uuid: Type.String({ pattern: uuidPattern }),
  api_key: Type.String({ minLength: 16, maxLength: 256 }),
  device_type: Type.String({ minLength: 1, maxLength: 64 }),
  device_name: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
  supervisor_version: Type.Optional(Type.String({ maxLength: 64 })),
  os_version: Type.Optional(Type.String({ maxLength: 255 })),
});
export type RegisterRequest = Static<typeof RegisterRequest>;

export const RegisterResponse = Type.Object({
  id: Type.Integer(),
  uuid: Type.String(),
  device_name: Type.String(),
  belongs_to__application: Type.Integer(),
});
export type RegisterResponse = Static<typeof RegisterResponse>;

/** `GET /device/v3/:uuid/state`: `{ [uuid]: target }`, with an ETag for conditional polls. */
export const TargetStateResponse = Type.Record(Type.String(), WireLocalState);
export type TargetStateResponse = Static<typeof TargetStateResponse>;

const ServiceReport = Type.Object({
  image: Type.String(),
  /** The cloud's image id from the target state: it keys the cloud's image_install record. */
  image_id: Type.Optional(Type.Integer({ minimum: 1 })),
  status: Type.String(),
  download_progress: Type.Union([Type.Integer({ minimum: 0, maximum: 100 }), Type.Null()]),
  release_id: Type.Optional(Type.Integer()),
});

const AppReport = Type.Object({
  release_id: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
  commit: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  services: Type.Record(Type.String(), ServiceReport),
});

/** One device's report. Every field is optional: the supervisor sends only what changed. */
export const DeviceReport = Type.Object(
  {
    status: Type.Optional(Type.String({ maxLength: 64 })),
    is_online: Type.Optional(Type.Boolean()),
    os_version: Type.Optional(Type.String({ maxLength: 255 })),
    supervisor_version: Type.Optional(Type.String({ maxLength: 64 })),
    ip_address: Type.Optional(Type.String({ maxLength: 1024 })),
    mac_address: Type.Optional(Type.String({ maxLength: 1024 })),
    api_port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    download_progress: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 100 }), Type.Null()])),
    update_pending: Type.Optional(Type.Boolean()),
    update_downloaded: Type.Optional(Type.Boolean()),
    update_failed: Type.Optional(Type.Boolean()),
    apps: Type.Optional(Type.Record(Type.String({ pattern: '^[1-9][0-9]*$' }), AppReport)),
  },
  { additionalProperties: false },
);
export type DeviceReport = Static<typeof DeviceReport>;

/** `PATCH /device/v3/state`: `{ [uuid]: report }`. */
export const StateReportBody = Type.Record(Type.String({ pattern: uuidPattern }), DeviceReport);
export type StateReportBody = Static<typeof StateReportBody>;

/** Cloud -> device over the tunnel: one device API call. */
export const TunnelRequest = Type.Object({
  type: Type.Literal('request'),
  id: Type.Integer({ minimum: 0 }),
  method: Type.Union(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'].map((m) => Type.Literal(m))),
  path: Type.String({ pattern: '^/' }),
  body: Type.Optional(Type.Unknown()),
});
export type TunnelRequest = Static<typeof TunnelRequest>;

/** Device -> cloud: the answer, body as text (the device API may answer plain text). */
export const TunnelResponse = Type.Object({
  type: Type.Literal('response'),
  id: Type.Integer({ minimum: 0 }),
  status: Type.Integer(),
  contentType: Type.Optional(Type.String()),
  body: Type.String(),
});
export type TunnelResponse = Static<typeof TunnelResponse>;
