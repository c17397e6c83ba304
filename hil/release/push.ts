/**
 * A built release onto a registry, for a device that pulls: each service's image tagged
 * `<registry>/<project>/<service>:<tag>` (the tag from the image id, so a rebuilt image is a
 * new reference) and pushed from the engine it was built in. The release that comes back names
 * the registry references; its commit is unchanged (the same images). A service the device
 * pulls as named (`pulledAsNamed`) keeps its reference.
 */
import type Docker from 'dockerode';
import { FleetlabError, errorText } from '../../src/errors.js';
import { streamDone } from '../../src/engine-client/engine-stream.js';
import type { Release } from './release.js';

/** A repository path component as the registry accepts it: lowercase letters and digits, single separators. */
export function repositoryComponent(name: string): string {
  const cleaned = name.toLowerCase().replace(/[^a-z0-9._-]+/g, '-').replace(/[._-]{2,}/g, '-').replace(/^[._-]+|[._-]+$/g, '');
  return cleaned || 'app';
}

/** `<registry>/<project>/<service>:<first 16 hex digits of the image id>`. */
export function registryRef(registry: string, project: string, service: string, imageId: string): string {
  const tag = imageId.replace(/^sha256:/, '').slice(0, 16);
  return `${registry}/${repositoryComponent(project)}/${repositoryComponent(service)}:${tag}`;
}

export async function pushRelease(release: Release, o: { docker: Docker; registry: string; log?: (line: string) => void }): Promise<Release> {
  const log = o.log ?? (() => undefined);
  const images: Record<string, string> = {};
  for (const service of release.project.services) {
    if (release.pulledAsNamed.includes(service.name)) {
      images[service.name] = release.images[service.name]!;
      continue;
    }
    const ref = registryRef(o.registry, release.project.name, service.name, release.imageIds[service.name]!);
    const colon = ref.lastIndexOf(':');
    const where = `${release.project.file}: services.${service.name}`;
    try {
      await o.docker.getImage(release.images[service.name]!).tag({ repo: ref.slice(0, colon), tag: ref.slice(colon + 1) });
      const stream = await o.docker.getImage(ref).push({ authconfig: { serveraddress: o.registry } });
      await streamDone(o.docker, stream);
    } catch (err) {
      throw new FleetlabError('HIL_ERR_REGISTRY', `${where}: pushing ${ref} to the registry at ${o.registry} failed: ${errorText(err)}`, { cause: err });
    }
    log(`[${service.name}] pushed ${ref}`);
    images[service.name] = ref;
  }
  return { ...release, images };
}
