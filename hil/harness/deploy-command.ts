/**
 * `fleetlab deploy <compose>`: the release path of `device.deploy()` from the command line,
 * to one device in local mode (`--device URL`) or to a fleet on a fleetlab cloud (`--fleet`).
 * Without `--registry` the images are built in the engine the devices use (this machine's
 * dockerd, for simulated devices); with it they are pushed there and the devices pull them,
 * built for arm64 boards with `--arch arm64` (a private build engine, started for the command).
 */
import { existsSync } from 'node:fs';
import Docker from 'dockerode';
import { FleetlabError, errorText } from '../../src/errors.js';
import { engineAt } from '../../src/engine-client/engine-at.js';
import { DeviceApi } from '../lib/device-api.js';
import { httpApiAt } from '../lib/http.js';
import { until } from '../../src/wait.js';
import { startBuildEngine, type BuildEngine } from '../release/build-engine.js';
import { buildLog } from '../release/image-build.js';
import type { ImageSource } from '../release/image-source.js';
import { ignoredWarning, loadCompose } from '../release/compose.js';
import { deployLocal } from '../release/local-deploy.js';
import { findFleet, fleetProgress, publishRelease } from '../release/publish.js';
import { pushRelease } from '../release/push.js';
import { buildRelease } from '../release/release.js';

const PRECHECK_TIMEOUT_MS = 10_000;

export interface DeployCommandOptions {
  compose: string;
  device?: string;
  fleet?: string;
  cloud?: string;
  apiKey?: string;
  dockerSocket: string;
  /** `host:port` of a registry the devices pull from. */
  registry?: string;
  /** Build for this architecture in a private build engine (needs `registry`). */
  arch?: 'arm64';
  env: Record<string, string>;
  /** Refused compose keys to leave out (`--ignore-key`), as `ignoreComposeKeys` in fleetlab.config. */
  ignoreKeys?: readonly string[];
  wait: boolean;
  timeoutMs: number;
  log: (line: string) => void;
}

/** `KEY=VALUE` flags as a map; a flag without `=` is an error naming it. */
export function parseEnvFlags(flags: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const flag of flags) {
    const eq = flag.indexOf('=');
    if (eq <= 0) throw new FleetlabError('HIL_ERR_COMPOSE', `--env ${JSON.stringify(flag)}: write KEY=VALUE`);
    env[flag.slice(0, eq)] = flag.slice(eq + 1);
  }
  return env;
}

export async function runDeploy(o: DeployCommandOptions): Promise<void> {
  if (Boolean(o.device) === Boolean(o.fleet)) throw new FleetlabError('HIL_ERR_DEPLOY', 'name one destination: --device URL (a device in local mode) or --fleet NAME --cloud URL');
  if (!o.apiKey) throw new FleetlabError('HIL_ERR_DEPLOY', o.device ? "--api-key: the device's API key is needed" : "--api-key: a cloud key that may write the fleet is needed (npm start prints the admin key)");
  if (o.arch && !o.registry) throw new FleetlabError('HIL_ERR_DEPLOY', `--arch ${o.arch} needs --registry HOST:PORT: a board pulls its release from a registry (fleetlab registry serves one)`);
  if (o.registry !== undefined && !/^[^\s/]+:[0-9]{1,5}$/.test(o.registry)) throw new FleetlabError('HIL_ERR_DEPLOY', `--registry ${JSON.stringify(o.registry)}: write HOST:PORT, e.g. 127.0.0.1:5000`);
  if (!o.device && !o.cloud) throw new FleetlabError('HIL_ERR_DEPLOY', '--fleet needs --cloud URL (npm start prints it)');
  if (!o.device && Object.keys(o.env).length) throw new FleetlabError('HIL_ERR_DEPLOY', "--env goes with --device; a fleet's variables are set on the cloud (fleet environment variables)");
  const project = loadCompose(o.compose, { ignore: o.ignoreKeys ?? [] });
  for (const key of project.ignored) o.log(`warning: ${ignoredWarning(project.file, key)}`);
  for (const entry of project.unusedIgnores) o.log(`warning: --ignore-key ${entry} names no key fleetlab refuses in ${project.file}`);
  o.log(`${project.file}: ${project.services.length} service${project.services.length === 1 ? '' : 's'} (${project.services.map((s) => s.name).join(', ')})`);
  const device = o.device ? deviceApi(o) : undefined;
  if (device) await deviceAnswers(device, o.device!);
  else await findFleet(cloudTarget(o));
  let engine: BuildEngine | undefined;
  try {
    if (o.arch) engine = await startBuildEngine({ progress: o.log });
    const docker = engine ? new Docker({ socketPath: engine.socketPath }) : await engineAt(o.dockerSocket, 'start dockerd, or pass --docker-socket', 'to build the release in: ');
    // Built for a board: an `image:` service's image comes from this machine's dockerd when it is there for arm64.
    const imageSource: ImageSource | undefined = engine && existsSync(o.dockerSocket) ? { docker: new Docker({ socketPath: o.dockerSocket }), architecture: engine.architecture } : undefined;
    await (device ? toDevice(o, device, project, docker, imageSource) : toFleet(o, project, docker, imageSource));
  } finally {
    await engine?.close();
  }
}

const cloudTarget = (o: DeployCommandOptions) => ({ url: o.cloud!.replace(/\/+$/, ''), apiKey: o.apiKey!, fleet: o.fleet! });

/** The key is all the release path needs of the device's identity. */
function deviceApi(o: DeployCommandOptions): DeviceApi {
  return new DeviceApi(httpApiAt(o.device!.replace(/\/+$/, ''), o.apiKey!));
}

/**
 * Asks the device for its status before anything is built: a wrong URL or key is said in a
 * second, not after minutes of building (an arm64 build engine, every service's image).
 */
async function deviceAnswers(api: DeviceApi, url: string): Promise<void> {
  const reply = await api.stateStatus({ timeoutMs: PRECHECK_TIMEOUT_MS }).catch((err: unknown) => {
    throw new FleetlabError('HIL_ERR_DEPLOY', `no device answers at ${url} (${errorText(err)}); nothing was built. Check that its supervisor runs and listens there (fleetlab sim device and npm start print its URL), and the host and port of --device`, { cause: err });
  });
  if (reply.status === 401) throw new FleetlabError('HIL_ERR_DEPLOY', `the device at ${url} refused the key (401); nothing was built. Check --api-key: the device's own key (fleetlab sim device and npm start print it)`);
  if (reply.status !== 200) throw new FleetlabError('HIL_ERR_DEPLOY', `the device at ${url} answered GET /v2/state/status with ${reply.status}: ${JSON.stringify(reply.body)}; nothing was built. Is that URL a fleetlab or balena supervisor?`);
}

async function toDevice(o: DeployCommandOptions, api: DeviceApi, project: ReturnType<typeof loadCompose>, docker: Docker, imageSource?: ImageSource): Promise<void> {
  await deployLocal({ api, project, docker, ...(o.registry ? { registry: o.registry } : {}), ...(imageSource ? { imageSource } : {}), log: o.log, env: o.env, wait: o.wait, timeoutMs: o.timeoutMs });
}

async function toFleet(o: DeployCommandOptions, project: ReturnType<typeof loadCompose>, docker: Docker, imageSource?: ImageSource): Promise<void> {
  const built = await buildRelease(project, { docker, progress: buildLog(o.log), devicePulls: Boolean(o.registry), ...(imageSource ? { imageSource } : {}) });
  const release = o.registry ? await pushRelease(built, { docker, registry: o.registry, log: o.log }) : built;
  const target = cloudTarget(o);
  const published = await publishRelease(release, target, o.log);
  if (!o.wait) return;
  let said = '';
  const progress = async () => {
    const p = await fleetProgress(target, published.fleetId, published.releaseId);
    const line = `${p.running} of ${p.online} online device${p.online === 1 ? '' : 's'} (${p.devices} in the fleet) run release ${published.releaseId}`;
    if (line !== said) o.log((said = line));
    return p;
  };
  await until(`release ${published.releaseId} on the fleet`, progress, (p) => p.online > 0 && p.running >= p.online, {
    timeoutMs: o.timeoutMs,
    intervalMs: 1_000,
    // The cloud failing to answer ends the deploy, as it always did.
    stopOn: () => true,
    fail: (f) => (f.end === 'timeout' ? new FleetlabError('HIL_ERR_DEPLOY', `not every online device ran release ${published.releaseId} within ${o.timeoutMs / 1000} s: ${said}`) : undefined),
  });
}
