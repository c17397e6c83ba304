/**
 * The engine side of the deps and app layers: `docker build` from a tar context, and the tags
 * a rebuild leaves behind.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { execa } from 'execa';
import { streamDone } from '../../src/engine-client/engine-stream.js';
import { needTool } from '../tools.js';
import { buildTools } from './plan.js';

export async function imageId(docker: Docker, ref: string): Promise<string | undefined> {
  try {
    return (await docker.getImage(ref).inspect()).Id;
  } catch {
    return undefined;
  }
}

export async function imageExists(docker: Docker, ref: string): Promise<boolean> {
  return (await imageId(docker, ref)) !== undefined;
}

/** Removes the other tags of `repo` (older builds); images still used by a container stay. */
export async function pruneOtherTags(docker: Docker, repo: string, keep: string): Promise<void> {
  const images = await docker.listImages({ filters: { reference: [repo] } });
  for (const image of images) {
    for (const tag of image.RepoTags ?? []) {
      if (tag !== keep && tag.startsWith(`${repo}:`)) await docker.getImage(tag).remove().catch(() => undefined);
    }
  }
}

/**
 * `docker build` through the Engine API from a tar context streamed by tar: the Dockerfile
 * and what `prepare` writes (`contextPaths`) from a staging dir, `repoPaths` from the checkout.
 */
export async function buildFromContext(
  docker: Docker,
  o: {
    ref: string;
    dockerfile: string;
    repoRoot: string;
    repoPaths: readonly string[];
    prepare?: (dir: string) => Promise<void>;
    contextPaths?: readonly string[];
    report: (detail: string) => void;
  },
): Promise<void> {
  const tar = needTool(buildTools.tar);
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-device-ctx-'));
  try {
    await writeFile(join(dir, 'Dockerfile'), o.dockerfile);
    await o.prepare?.(dir);
    const listFile = join(dir, '.files');
    await writeFile(listFile, `${o.repoPaths.join('\0')}\0`);
    // Compiler intermediates of the native addons are not needed at run time.
    const context = execa(
      tar,
      ['-cf', '-', '--exclude=obj.target', '--exclude=.deps', '-C', dir, 'Dockerfile', ...(o.contextPaths ?? []), '-C', o.repoRoot, '--null', '-T', listFile],
      { buffer: false },
    );
    const stream = await docker.buildImage(context.stdout! as unknown as NodeJS.ReadableStream, { t: o.ref, rm: true, forcerm: true });
    await streamDone(docker, stream, { what: `building ${o.ref}`, onEvent: (e) => {
      const line = e.stream?.trim();
      if (line?.startsWith('Step ')) o.report(line);
    } });
    await context;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
