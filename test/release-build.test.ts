/**
 * A release's images built on the real dockerd: the tag follows the build context, and every
 * way a build goes wrong is one HIL_ERR_BUILD naming the file, the service and the fix.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCompose } from '../hil/release/compose.js';
import { dockerignoreMatcher } from '../hil/release/image-build.js';
import { buildRelease } from '../hil/release/release.js';
import { FleetlabError } from '../src/errors.js';
import { cacheRoot } from '../device-image/tools.js';
import { BASE_IMAGE, ensureBaseImage } from '../sim/images/base-image.js';

const SOCKET = '/var/run/docker.sock';
const docker = new Docker({ socketPath: SOCKET });
const PROJECT = `fleetlab-build-test-${process.pid}`;
let dir: string;

function write(path: string, text: string): void {
  mkdirSync(join(dir, path, '..'), { recursive: true });
  writeFileSync(join(dir, path), text);
}

async function buildError(): Promise<FleetlabError> {
  const err = await buildRelease(loadCompose(dir), { docker }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FleetlabError);
  expect((err as FleetlabError).code).toBe('HIL_ERR_BUILD');
  return err as FleetlabError;
}

beforeAll(async () => {
  await ensureBaseImage(SOCKET, undefined, { cacheDir: cacheRoot() });
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-build-'));
});

afterAll(async () => {
  const images = await docker.listImages({ filters: { reference: [`${PROJECT}-*`] } });
  for (const image of images) await docker.getImage(image.Id).remove({ force: true }).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

describe('buildRelease on dockerd', () => {
  it('builds a service, tags it by its context, and keeps the tag while only ignored files change', async () => {
    write('compose.yaml', `name: ${PROJECT}\nservices:\n  web:\n    build: ./web\n  base:\n    image: ${BASE_IMAGE}\n`);
    write('web/Dockerfile', `FROM ${BASE_IMAGE}\nCOPY hello.txt /hello.txt\nCMD ["cat", "/hello.txt"]\n`);
    write('web/hello.txt', 'v1\n');
    write('web/.dockerignore', 'notes/\n*.log\n');
    write('web/notes/todo.md', 'later\n');
    const progress: string[] = [];
    const first = await buildRelease(loadCompose(dir), { docker, progress: (e) => e.summary && progress.push(`${e.service}: ${e.line}`) });
    expect(first.images.web).toMatch(new RegExp(`^${PROJECT}-web:[0-9a-f]{12}$`));
    expect(first.images.base).toBe(BASE_IMAGE);
    expect(progress[0]).toBe(`web: building ${first.images.web} from ${join(dir, 'web')}`);
    expect(progress[1]).toMatch(new RegExp(`^web: built ${first.images.web} in [0-9.]+ s$`));
    const inspect = await docker.getImage(first.images.web!).inspect();
    expect(inspect.Config.Cmd).toEqual(['cat', '/hello.txt']);

    write('web/notes/todo.md', 'much later\n');
    write('web/build.log', 'noise\n');
    const again = await buildRelease(loadCompose(dir), { docker });
    expect(again.images.web).toBe(first.images.web);
    expect(again.commit).toBe(first.commit);

    write('web/hello.txt', 'v2\n');
    const changed = await buildRelease(loadCompose(dir), { docker });
    expect(changed.images.web).not.toBe(first.images.web);
    expect(changed.commit).not.toBe(first.commit);
  });

  it('a missing Dockerfile names the path and the fix', async () => {
    write('compose.yaml', `name: ${PROJECT}\nservices:\n  api:\n    build: { context: ./api, dockerfile: Dockerfile.arm }\n`);
    mkdirSync(join(dir, 'api'), { recursive: true });
    const err = await buildError();
    expect(err.message).toBe(`${join(dir, 'compose.yaml')}: services.api.build: no Dockerfile at ${join(dir, 'api', 'Dockerfile.arm')}; create it, or point build.dockerfile at yours`);
  });

  it('a missing context names it', async () => {
    write('compose.yaml', `name: ${PROJECT}\nservices:\n  api:\n    build: ./nowhere\n`);
    expect((await buildError()).message).toContain(`services.api.build: the build context ${join(dir, 'nowhere')} is not a directory`);
  });

  it('a failing step ends the message with what the build printed last', async () => {
    write('compose.yaml', `name: ${PROJECT}\nservices:\n  broken:\n    build: ./broken\n`);
    write('broken/Dockerfile', `FROM ${BASE_IMAGE}\nRUN echo "compiling the app" && false\n`);
    const err = await buildError();
    expect(err.message).toContain(`${join(dir, 'compose.yaml')}: services.broken.build: building ${PROJECT}-broken:`);
    expect(err.message).toMatch(/failed: .*returned a non-zero code: 1/);
    expect(err.message).toContain('last build output:');
    expect(err.message).toContain('compiling the app');
  });

  it('a base image that is not here says so and how to get one', async () => {
    write('compose.yaml', `name: ${PROJECT}\nservices:\n  old:\n    build: ./old\n`);
    write('old/Dockerfile', 'FROM fleetlab-test/never-built:0\n');
    const err = await buildError();
    expect(err.message).toContain('a base image in FROM is missing locally and no registry is reachable');
  });

  it('an image: that is not in the engine says so and how to get one', async () => {
    write('compose.yaml', `name: ${PROJECT}\nservices:\n  cache:\n    image: fleetlab-test/redis-never-pulled:7\n`);
    expect((await buildError()).message).toBe(
      `${join(dir, 'compose.yaml')}: services.cache.image: "fleetlab-test/redis-never-pulled:7" is not in the device's engine, and fleetlab reaches no outside registry: build it (add a build: section), or load it with docker load / docker import first`,
    );
  });
});

describe('dockerignoreMatcher', () => {
  it('matches paths, directories, globs and re-includes', () => {
    const ignored = dockerignoreMatcher('# comment\nnode_modules\n*.log\ndocs/**/*.png\n!keep.log\n/build/\n');
    expect(ignored('node_modules')).toBe(true);
    expect(ignored('node_modules/x/index.js')).toBe(true);
    expect(ignored('a.log')).toBe(true);
    expect(ignored('keep.log')).toBe(false);
    expect(ignored('sub/a.log')).toBe(false); // a glob without ** stays in its directory, as Docker's does
    expect(ignored('docs/a/b/c.png')).toBe(true);
    expect(ignored('build/out.bin')).toBe(true);
    expect(ignored('src/main.c')).toBe(false);
  });
});
