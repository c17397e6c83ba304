/**
 * Release fixtures the specs deploy in local mode, and waiting until a release runs, all
 * through the device API (engine-neutral: the specs never talk to an engine).
 */
import type { WireLocalState } from '../../src/protocol/target-state.js';
import type { DeviceApi, StateStatus } from './device-api.js';
import { pollUntil, scaled } from './wait.js';

export const APP_ID = 1;
export const APP_NAME = 'hilapp';
export const API_LABEL = (vendor: string) => `io.${vendor}.features.supervisor-api`;

/**
 * Two services: `main` (the supervisor-api label, a `data` volume, image :1 unless told)
 * and `worker` (image :2). `releaseId` sets commit `commit<N>`.
 */
export function twoServiceRelease(vendor: string, o: { releaseId?: number; mainImage?: string; name?: string; config?: Record<string, string> } = {}): WireLocalState {
  const releaseId = o.releaseId ?? 1;
  return {
    name: o.name ?? 'hil-device',
    config: { SUPERVISOR_LOCAL_MODE: '1', ...o.config },
    apps: {
      [String(APP_ID)]: {
        name: APP_NAME,
        commit: `commit${releaseId}`,
        releaseId: String(releaseId),
        services: {
          '11': {
            serviceName: 'main', serviceId: 11, imageId: 101, image: o.mainImage ?? 'fleetlab/test-app:1',
            environment: { GREETING: 'hello' }, labels: { [API_LABEL(vendor)]: '1' }, volumes: ['data:/data'],
          },
          '12': { serviceName: 'worker', serviceId: 12, imageId: 102, image: 'fleetlab/test-app:2', environment: {}, labels: {} },
        },
        volumes: { data: {} },
        networks: {},
      },
    },
  };
}

/** One service `solo` with the supervisor-api label (the v1 app endpoints need one service). */
export function singleServiceRelease(vendor: string, o: { releaseId?: number } = {}): WireLocalState {
  const releaseId = o.releaseId ?? 1;
  return {
    name: 'hil-device',
    config: { SUPERVISOR_LOCAL_MODE: '1' },
    apps: {
      [String(APP_ID)]: {
        name: APP_NAME,
        commit: `solo${releaseId}`,
        releaseId: String(releaseId),
        services: {
          '21': { serviceName: 'solo', serviceId: 21, imageId: 201, image: 'fleetlab/test-app:1', environment: { MODE: 'one' }, labels: { [API_LABEL(vendor)]: '1' } },
        },
        volumes: {},
        networks: {},
      },
    },
  };
}

/** Waits until `appState` is applied for `release` with every named service Running. */
export function waitRunning(api: DeviceApi, release: string, services: readonly string[], timeoutMs = 90_000): Promise<StateStatus> {
  return pollUntil(
    `release ${release} running ${services.join(', ')}`,
    async () => (await api.stateStatus()).body,
    (s) =>
      s.appState === 'applied' &&
      s.release === release &&
      services.every((name) => s.containers.some((c) => c.serviceName === name && c.status === 'Running')),
    { timeoutMs },
  );
}

/** The container id of `service` as the API reports it. */
export async function containerOf(api: DeviceApi, service: string): Promise<{ id: string; status: string } | undefined> {
  const status = (await api.stateStatus()).body;
  const c = status.containers.find((x) => x.serviceName === service);
  return c ? { id: c.containerId, status: c.status } : undefined;
}

/**
 * After an API-triggered reboot or restart: waits (bounded) until the API has gone away and
 * answers again. A device that never goes away fails here, which is the point.
 */
export async function waitRebooted(api: DeviceApi, timeoutMs = 60_000): Promise<void> {
  // A slow answer is not "down": an emulated board busy stopping containers took over 1 s.
  const ping = () => api.ping({ timeoutMs: scaled(1000) }).then((r) => r.status, () => 0);
  await pollUntil('device API down for the reboot', ping, (s) => s !== 200, { timeoutMs, intervalMs: 25 });
  await pollUntil('device API back after the reboot', ping, (s) => s === 200, { timeoutMs });
}
