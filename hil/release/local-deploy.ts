/**
 * A release onto one device in local mode, through its API: build the compose project's
 * images in the engine the device uses, post the target state, wait until every service
 * runs. What `device.deploy()` of `fleetlab/test` and `fleetlab deploy --device` both do.
 */
import type Docker from 'dockerode';
import { FleetlabError, errorText } from '../../src/errors.js';
import type { DeviceApi, StateStatus } from '../lib/device-api.js';
import { scaled } from '../lib/wait.js';
import { until } from '../../src/wait.js';
import type { ComposeProject } from './compose.js';
import { buildLog } from './image-build.js';
import { pushRelease } from './push.js';
import type { ImageSource } from './image-source.js';
import { buildRelease, localTargetState } from './release.js';

export interface DeployOptions {
  /** Environment added to every service, over the compose file's. */
  env?: Record<string, string>;
  /** The app id on the device (default 1). */
  appId?: number;
  /** Resolve once the device has taken the target state, without waiting for it to run (default: wait). */
  wait?: boolean;
  /** How long to wait for every service to run (default 120 s, scaled to the target's speed). */
  timeoutMs?: number;
}

export interface DeployedRelease {
  appId: number;
  /** What `/v2/state/status` reports as `release` once this release runs. */
  releaseId: number;
  /** A hash of the services, their settings and their image ids. */
  commit: string;
  /** Image reference per service. */
  images: Record<string, string>;
  /** The services, in compose order. */
  services: string[];
}

const DEFAULT_APP_ID = 1;
const DEPLOY_TIMEOUT_MS = 120_000;

/**
 * `registry`: the device pulls, so the images are pushed there and the target state names them
 * by their registry references; without it the device shares `docker`, the engine built in.
 */
export async function deployLocal(o: DeployOptions & { api: DeviceApi; project: ComposeProject; docker: Docker; registry?: string; imageSource?: ImageSource; log: (line: string) => void }): Promise<DeployedRelease> {
  const { api, project, log } = o;
  const built = await buildRelease(project, { docker: o.docker, progress: buildLog(log), devicePulls: Boolean(o.registry), ...(o.imageSource ? { imageSource: o.imageSource } : {}) });
  const release = o.registry ? await pushRelease(built, { docker: o.docker, registry: o.registry, log }) : built;
  const appId = o.appId ?? DEFAULT_APP_ID;
  const status = await api.stateStatus();
  if (status.status !== 200) throw new FleetlabError('HIL_ERR_DEPLOY', `the device answered GET /v2/state/status with ${status.status}: ${JSON.stringify(status.body)}; check its URL and key`);
  const current = Number(status.body.release);
  const releaseId = (Number.isInteger(current) && current > 0 ? current : 0) + 1;
  const state = localTargetState(release, { appId, releaseId, ...(o.env ? { env: o.env } : {}) });
  const reply = await api.setLocalTargetState(state);
  if (reply.status !== 200) {
    const hint = reply.status === 400 && JSON.stringify(reply.body).includes('local mode') ? ' (the device follows a cloud: deploy to its fleet with --fleet, or start it in local mode)' : '';
    throw new FleetlabError('HIL_ERR_DEPLOY', `the device refused the release of ${project.file} (${reply.status}): ${JSON.stringify(reply.body)}${hint}`);
  }
  log(`release ${releaseId} (${release.commit.slice(0, 8)}) of ${project.name} sent to the device`);
  const services = project.services.map((s) => s.name);
  const deployed: DeployedRelease = { appId, releaseId, commit: release.commit, images: release.images, services };
  if (o.wait === false) return deployed;
  await waitForLocalRelease(api, deployed, o.timeoutMs);
  log(`release ${releaseId} runs: ${services.join(', ')}`);
  return deployed;
}

/** Waits until the release is applied with every service Running; a timeout names each service's status. */
/** Whether the status shows `release` applied with every one of its services Running. */
export function releaseRuns(s: StateStatus, release: Pick<DeployedRelease, 'releaseId' | 'services'>): boolean {
  const running = (name: string) => s.containers.some((c) => c.serviceName === name && c.status === 'Running');
  return s.appState === 'applied' && s.release === String(release.releaseId) && release.services.every(running);
}

export async function waitForLocalRelease(api: DeviceApi, release: Pick<DeployedRelease, 'releaseId' | 'services'>, timeoutMs = DEPLOY_TIMEOUT_MS): Promise<void> {
  const { releaseId, services } = release;
  await until(`release ${releaseId} running`, async () => (await api.stateStatus()).body, (s) => releaseRuns(s, release), {
    timeoutMs: scaled(timeoutMs),
    intervalMs: 250,
    // A deploy's timeout names each service's status: the harness's code and wording.
    fail: (f) => {
      const last = f.last === undefined ? '(no status read)' : 'error' in f.last ? `error: ${errorText(f.last.error)}` : f.last.value;
      return new FleetlabError('HIL_ERR_DEPLOY', `release ${releaseId} did not run within ${scaled(timeoutMs)} ms; last seen: ${describe(last, services)}. The supervisor's log says why.`);
    },
  });
}

function describe(last: StateStatus | string, services: readonly string[]): string {
  if (typeof last === 'string') return last;
  const each = services.map((name) => {
    const c = last.containers.find((x) => x.serviceName === name && x.status !== 'Dead');
    const image = last.images.find((i) => i.serviceName === name);
    return `${name}: ${c?.status ?? (image ? `image ${image.status}` : 'no container')}`;
  });
  return `release ${last.release || '(none)'} ${last.appState}; ${each.join(', ')}`;
}
