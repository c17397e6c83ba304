/**
 * `fleetlab deploy --device URL`: a device that does not answer, or refuses the key, is said
 * before anything is built (and with `--fleet`, a cloud that does not answer); a build's own
 * output is shown as it runs, each line prefixed with its service as docker compose prints it.
 * The device is an in-process supervisor on the real dockerd, which shares the engine the
 * release is built in.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { freePort } from '../src/free-port.js';
import { runDeploy, type DeployCommandOptions } from '../hil/harness/deploy-command.js';
import { BASE_IMAGE } from '../sim/images/base-image.js';
import { dockerSocket, startSupervisorFixture, type SupervisorFixture } from './helpers/supervisor-fixture.js';

const project = `fleetlab-test-stream-${randomBytes(3).toString('hex')}`;
let dir: string;
let f: SupervisorFixture;
let url: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-deploy-command-'));
  mkdirSync(join(dir, 'web'));
  writeFileSync(join(dir, 'compose.yaml'), `name: ${project}\nservices:\n  web:\n    build: ./web\n`);
  writeFileSync(join(dir, 'web', 'Dockerfile'), `FROM ${BASE_IMAGE}\nRUN echo "compiling the app"\nCMD ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]\n`);
  f = await startSupervisorFixture();
  url = await f.sup.api.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await f?.close();
  for (const image of (await f?.docker.listImages({ filters: { reference: [`${project}-web`] } })) ?? []) await f.docker.getImage(image.Id).remove({ force: true }).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

const deploy = (o: Partial<DeployCommandOptions>, lines: string[]) => runDeploy({ compose: dir, dockerSocket, env: {}, wait: true, timeoutMs: 60_000, log: (l) => lines.push(l), ...o });

async function refusal(run: Promise<void>): Promise<FleetlabError> {
  const err = await run.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(FleetlabError);
  expect((err as FleetlabError).code).toBe('HIL_ERR_DEPLOY');
  return err as FleetlabError;
}

describe('fleetlab deploy --device', () => {
  it('says a device that does not answer before it builds anything, naming the URL and what to check', async () => {
    // Nothing listens there: freePort only checked it could bind it.
    const nobody = `http://127.0.0.1:${await freePort()}`;
    const lines: string[] = [];
    const err = await refusal(deploy({ device: nobody, apiKey: 'k' }, lines));
    expect(err.message).toContain(`no device answers at ${nobody} (`);
    expect(err.message).toContain('ECONNREFUSED');
    expect(err.message).toContain('nothing was built. Check that its supervisor runs and listens there');
    expect(lines.filter((l) => l.startsWith('[web]'))).toEqual([]);
  });

  it('says a key the device refuses before it builds anything', async () => {
    const lines: string[] = [];
    const err = await refusal(deploy({ device: url, apiKey: 'not-the-key' }, lines));
    expect(err.message).toBe(`the device at ${url} refused the key (401); nothing was built. Check --api-key: the device's own key (fleetlab sim device and npm start print it)`);
    expect(lines.filter((l) => l.startsWith('[web]'))).toEqual([]);
  });

  it('with --fleet, says a cloud that does not answer before it builds anything', async () => {
    const nobody = `http://127.0.0.1:${await freePort()}`;
    const lines: string[] = [];
    const err = await refusal(deploy({ fleet: 'demo', cloud: nobody, apiKey: 'k' }, lines));
    expect(err.message).toContain(`the cloud at ${nobody} does not answer (`);
    expect(lines.filter((l) => l.startsWith('[web]'))).toEqual([]);
  });

  it("streams the build's output with the service named, then deploys", async () => {
    const lines: string[] = [];
    await deploy({ device: url, apiKey: f.key() }, lines);
    const at = (pattern: RegExp) => lines.findIndex((l) => pattern.test(l));
    const building = at(/^\[web\] building fleetlab-test-stream-[0-9a-f]+-web:[0-9a-f]{12} from /);
    const step = at(/^\[web\] Step 2\/3 : RUN echo "compiling the app"$/);
    const output = at(/^\[web\] compiling the app$/);
    const built = at(/^\[web\] built fleetlab-test-stream-[0-9a-f]+-web:[0-9a-f]{12} in [0-9.]+ s$/);
    const sent = at(/^release 1 \([0-9a-f]{8}\) of fleetlab-test-stream-[0-9a-f]+ sent to the device$/);
    expect([building, step, output, built, sent].every((i) => i >= 0), lines.join('\n')).toBe(true);
    expect(building < step && step < output && output < built && built < sent).toBe(true);
    expect(lines.at(-1)).toBe('release 1 runs: web');
  });
});
