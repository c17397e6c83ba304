/**
 * A typed client for the whole device API (docs/device-api.md), built on
 * `ApiProtocol.request` so every call is a step on the device's timeline. Methods never
 * throw on an HTTP status: specs assert statuses and bodies, including the error cases.
 */
import type { WireLocalState } from '../../src/protocol/target-state.js';
import type { DataError, DeviceState, AppInfo, ApplicationsState, AppStateV2, StateStatus, ProxyConfig, HostConfig, JournalLogsBody, ServiceSelector } from '../../src/protocol/device-api.js';
import type { ApiProtocol, HttpResponse, HttpStream } from '../../device-access/protocols.js';

export type {
  Failed,
  DataError,
  DeviceState,
  AppInfo,
  Health,
  ServiceState,
  ApplicationsState,
  AppStateV2,
  StatusContainer,
  ImageStatus,
  StatusImage,
  StateStatus,
  ProxyConfig,
  HostConfig,
  JournalLogsBody,
  ServiceSelector,
  ServiceStatus,
  DeviceStatus,
} from '../../src/protocol/device-api.js';

export interface Reply<T> {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly text: string;
  /** The body parsed as JSON; throws naming the call if it is not JSON. */
  readonly body: T;
}

export interface CallOptions {
  /** Key sent as Bearer; `null` sends none; default the device key. */
  readonly key?: string | null;
  /** Send the key as `?apikey=` instead of a header. */
  readonly keyInQuery?: boolean;
  readonly timeoutMs?: number;
}

export class DeviceApi {
  constructor(readonly protocol: ApiProtocol) {}

  get key(): string {
    return this.protocol.identity.apiKey;
  }

  /** Any call, typed by the caller (for error cases the typed methods do not cover). */
  async call<T = unknown>(method: string, path: string, body?: unknown, options: CallOptions & { rawBody?: { contentType: string; data: string } } = {}): Promise<Reply<T>> {
    const key = options.key === undefined ? this.key : options.key;
    const res = await this.protocol.request(method, path, {
      ...(body !== undefined ? { body } : {}),
      ...(options.rawBody ? { rawBody: options.rawBody } : {}),
      ...(options.keyInQuery ? { key: null, ...(key !== null ? { query: { apikey: key } } : {}) } : { key }),
      ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
    });
    return reply<T>(method, path, res);
  }

  // Core (v1 and unversioned)
  ping(o?: CallOptions) { return this.call<string>('GET', '/ping', undefined, { key: null, ...o }); }
  blink(o?: CallOptions) { return this.call<''>('POST', '/v1/blink', undefined, o); }
  update(body?: { force?: boolean }, o?: CallOptions) { return this.call<''>('POST', '/v1/update', body, o); }
  reboot(body?: { force?: boolean }, o?: CallOptions) { return this.call<DataError>('POST', '/v1/reboot', body, o); }
  shutdown(body?: { force?: boolean }, o?: CallOptions) { return this.call<DataError>('POST', '/v1/shutdown', body, o); }
  purgeV1(body: { appId: number | unknown; force?: boolean }, o?: CallOptions) { return this.call<DataError>('POST', '/v1/purge', body, o); }
  restartV1(body: { appId: number | unknown; force?: boolean }, o?: CallOptions) { return this.call<string>('POST', '/v1/restart', body, o); }
  regenerateApiKey(o?: CallOptions) { return this.call<string>('POST', '/v1/regenerate-api-key', undefined, o); }
  device(o?: CallOptions) { return this.call<DeviceState>('GET', '/v1/device', undefined, o); }
  stopAppV1(appId: number, body?: { force?: boolean }, o?: CallOptions) { return this.call<{ containerId: string }>('POST', `/v1/apps/${appId}/stop`, body, o); }
  startAppV1(appId: number, o?: CallOptions) { return this.call<{ containerId: string }>('POST', `/v1/apps/${appId}/start`, undefined, o); }
  appV1(appId: number, o?: CallOptions) { return this.call<AppInfo>('GET', `/v1/apps/${appId}`, undefined, o); }
  healthy(o?: CallOptions) { return this.call<''>('GET', '/v1/healthy', undefined, { key: null, ...o }); }
  patchHostConfig(body: HostConfig, o?: CallOptions) { return this.call<string>('PATCH', '/v1/device/host-config', body, o); }
  hostConfig(o?: CallOptions) { return this.call<{ network: { hostname?: string; proxy?: Omit<ProxyConfig, 'password'> & { port: string } } }>('GET', '/v1/device/host-config', undefined, o); }

  // v2 applications
  applicationsState(o?: CallOptions) { return this.call<ApplicationsState>('GET', '/v2/applications/state', undefined, o); }
  appState(appId: number | string, o?: CallOptions) { return this.call<AppStateV2>('GET', `/v2/applications/${appId}/state`, undefined, o); }
  stateStatus(o?: CallOptions) { return this.call<StateStatus>('GET', '/v2/state/status', undefined, o); }
  restartService(appId: number, body: ServiceSelector & { force?: boolean } | Record<string, unknown>, o?: CallOptions) { return this.call<string>('POST', `/v2/applications/${appId}/restart-service`, body, o); }
  stopService(appId: number, body: ServiceSelector & { force?: boolean } | Record<string, unknown>, o?: CallOptions) { return this.call<string>('POST', `/v2/applications/${appId}/stop-service`, body, o); }
  startService(appId: number, body: ServiceSelector | Record<string, unknown>, o?: CallOptions) { return this.call<string>('POST', `/v2/applications/${appId}/start-service`, body, o); }
  restartApp(appId: number, body: { force?: boolean } = {}, o?: CallOptions) { return this.call<string>('POST', `/v2/applications/${appId}/restart`, body, o); }
  purgeApp(appId: number, body: { force?: boolean } = {}, o?: CallOptions) { return this.call<string>('POST', `/v2/applications/${appId}/purge`, body, o); }

  // v2 information and utilities
  version(o?: CallOptions) { return this.call<{ status: string; version: string }>('GET', '/v2/version', undefined, o); }
  containerIds(o?: CallOptions) { return this.call<{ status: string; services: Record<string, string> }>('GET', '/v2/containerId', undefined, o); }
  containerId(service: string, o?: CallOptions) { return this.call<{ status: string; containerId: string }>('GET', `/v2/containerId?service=${encodeURIComponent(service)}`, undefined, o); }
  deviceName(o?: CallOptions) { return this.call<{ status: string; deviceName: string }>('GET', '/v2/device/name', undefined, o); }
  tags(o?: CallOptions) { return this.call<{ status: string; tags: Array<{ id: number; name: string; value: string }> }>('GET', '/v2/device/tags', undefined, o); }
  vpn(o?: CallOptions) { return this.call<{ status: string; vpn: { enabled: boolean; connected: boolean } }>('GET', '/v2/device/vpn', undefined, o); }
  cleanupVolumes(o?: CallOptions) { return this.call<{ status: string; message?: string }>('GET', '/v2/cleanup-volumes', undefined, o); }
  journalLogs(body: JournalLogsBody | Record<string, unknown> = {}, o?: CallOptions) { return this.call<string>('POST', '/v2/journal-logs', body, o); }
  /** journal-logs as a stream (for `follow`); close it to go away. */
  journalLogsStream(body: JournalLogsBody, o: CallOptions = {}): Promise<HttpStream> {
    return this.protocol.stream('POST', '/v2/journal-logs', { body, key: o.key === undefined ? this.key : o.key, timeoutMs: o.timeoutMs ?? 60_000 });
  }

  // Local mode
  localTargetState(o?: CallOptions) { return this.call<{ status: string; state: { local: WireLocalState } }>('GET', '/v2/local/target-state', undefined, o); }
  setLocalTargetState(local: WireLocalState | Record<string, unknown>, o?: CallOptions) { return this.call<{ status: string; message: string }>('POST', '/v2/local/target-state', { local }, o); }
  deviceInfo(o?: CallOptions) { return this.call<{ status: string; info: { arch: string; deviceType: string } }>('GET', '/v2/local/device-info', undefined, o); }
  localLogsStream(o: CallOptions = {}): Promise<HttpStream> {
    return this.protocol.stream('GET', '/v2/local/logs', { key: o.key === undefined ? this.key : o.key, timeoutMs: o.timeoutMs ?? 60_000 });
  }
}

function reply<T>(method: string, path: string, res: HttpResponse): Reply<T> {
  let parsed: { value: T } | undefined;
  return {
    status: res.status,
    headers: res.headers,
    text: res.text,
    get body(): T {
      if (!parsed) {
        try {
          parsed = { value: JSON.parse(res.text) as T };
        } catch {
          throw new Error(`${method} ${path} answered ${res.status} with a body that is not JSON: ${JSON.stringify(res.text.slice(0, 200))}`);
        }
      }
      return parsed.value;
    },
  };
}
