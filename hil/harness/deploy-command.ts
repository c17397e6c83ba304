/**
 * `fleetlab deploy <compose>`: the release path of `device.deploy()` from the command line,
 * to one device in local mode (`--device URL`) or to a fleet on a fleetlab cloud (`--fleet`).
 * Images are built in the engine the devices use (this machine's dockerd for simulated
 * devices); boards reach them through a registry, which is a later step.
 */
import { FleetlabError } from '../../src/errors.js';
import { engineAt } from '../../sim/engine-at.js';
import { DeviceApi } from '../lib/device-api.js';
import { httpApi } from '../lib/http.js';
import { sleep } from '../lib/wait.js';
import { loadCompose } from '../release/compose.js';
import { deployLocal } from '../release/local-deploy.js';
import { fleetProgress, publishRelease } from '../release/publish.js';
import { buildRelease } from '../release/release.js';

export interface DeployCommandOptions {
  compose: string;
  device?: string;
  fleet?: string;
  cloud?: string;
  apiKey?: string;
  dockerSocket: string;
  env: Record<string, string>;
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
  const project = loadCompose(o.compose);
  o.log(`${project.file}: ${project.services.length} service${project.services.length === 1 ? '' : 's'} (${project.services.map((s) => s.name).join(', ')})`);
  const docker = await engineAt(o.dockerSocket, 'start dockerd, or pass --docker-socket', 'to build the release in: ');

  if (o.device) {
    // The key is all the release path needs of the device's identity.
    const api = new DeviceApi(httpApi({ url: o.device.replace(/\/+$/, ''), apiKey: o.apiKey, uuid: '', vendor: 'platform', lockRoot: '' }));
    await deployLocal({ api, project, docker, log: o.log, env: o.env, wait: o.wait, timeoutMs: o.timeoutMs });
    return;
  }

  if (!o.cloud) throw new FleetlabError('HIL_ERR_DEPLOY', '--fleet needs --cloud URL (npm start prints it)');
  if (Object.keys(o.env).length) throw new FleetlabError('HIL_ERR_DEPLOY', "--env goes with --device; a fleet's variables are set on the cloud (fleet environment variables)");
  const release = await buildRelease(project, { docker, progress: (e) => e.summary && o.log(`[${e.service}] ${e.line}`) });
  const target = { url: o.cloud.replace(/\/+$/, ''), apiKey: o.apiKey, fleet: o.fleet! };
  const published = await publishRelease(release, target, o.log);
  if (!o.wait) return;
  const deadline = Date.now() + o.timeoutMs;
  let said = '';
  for (;;) {
    const p = await fleetProgress(target, published.fleetId, published.releaseId);
    const line = `${p.running} of ${p.online} online device${p.online === 1 ? '' : 's'} (${p.devices} in the fleet) run release ${published.releaseId}`;
    if (line !== said) o.log((said = line));
    if (p.online > 0 && p.running >= p.online) return;
    if (Date.now() > deadline) throw new FleetlabError('HIL_ERR_DEPLOY', `not every online device ran release ${published.releaseId} within ${o.timeoutMs / 1000} s: ${line}`);
    await sleep(1_000);
  }
}
