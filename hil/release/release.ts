/**
 * A release is a value: a compose project whose images exist in an engine, named by a commit
 * that changes when anything the device would run changes. `buildRelease` is the side-effect
 * half (images built through the Engine API); `localTargetState` is pure and turns the value
 * into what `POST /v2/local/target-state` takes.
 */
import { createHash } from 'node:crypto';
import type Docker from 'dockerode';
import { FleetlabError, errorText } from '../../src/errors.js';
import { containerSettingsToWire } from '../../src/protocol/container-settings.js';
import { linksToWire, type WireLocalState, type WireService } from '../../src/protocol/target-state.js';
import { buildServiceImage, type BuildProgress } from './image-build.js';
import { adoptImage, type ImageSource } from './image-source.js';
import type { ComposeProject, ComposeService } from './compose.js';

export interface Release {
  project: ComposeProject;
  /** Image reference per service name, present in the engine the release was built for. */
  images: Record<string, string>;
  /** Engine image ids per service, part of the commit: a rebuilt image is a new release. */
  imageIds: Record<string, string>;
  /** 32 hex digits over services, settings and image ids. */
  commit: string;
  /**
   * Services whose `image:` the device pulls as the compose file names it, from that image's
   * own registry (none of this machine's engines has it for the device); only when `devicePulls`.
   */
  pulledAsNamed: readonly string[];
}

export interface BuildReleaseOptions {
  /** The engine the device's supervisor uses (or shares with the harness), or a build engine for the device's architecture. */
  docker: Docker;
  progress?: BuildProgress;
  /**
   * The device pulls the release from a registry: an `image:` the engine lacks is copied from
   * `imageSource` when that has it for the device, else left for the device to pull as named.
   * Without it the device shares `docker`, so such an image is an error.
   */
  devicePulls?: boolean;
  /** This machine's dockerd, when `docker` is a private build engine; only with `devicePulls`. */
  imageSource?: ImageSource;
}

/** Builds every `build:` service and finds every `image:` service's image (see `devicePulls`). */
export async function buildRelease(project: ComposeProject, options: BuildReleaseOptions): Promise<Release> {
  const images: Record<string, string> = {};
  const imageIds: Record<string, string> = {};
  const pulledAsNamed: string[] = [];
  for (const service of project.services) {
    const ref = service.build ? await buildServiceImage(project, service, options) : service.image!;
    images[service.name] = ref;
    const id = await imageId(options.docker, project, service, ref);
    if (id) {
      imageIds[service.name] = id;
      continue;
    }
    const where = `${project.file}: services.${service.name}.image`;
    if (!options.devicePulls) {
      throw new FleetlabError('HIL_ERR_BUILD', `${where}: "${ref}" is not in the device's engine, and fleetlab reaches no outside registry: build it (add a build: section), or load it with docker load / docker import first`);
    }
    const adoption = await adoptImage(ref, options.docker, options.imageSource, where);
    if (adoption.copied) {
      const copied = await imageId(options.docker, project, service, ref);
      if (!copied) throw new FleetlabError('HIL_ERR_BUILD', `${where}: "${ref}" was loaded into the build engine from this machine's dockerd but is not found there under that name`);
      options.progress?.({ service: service.name, line: `copied ${ref} from this machine's dockerd`, summary: true });
      imageIds[service.name] = copied;
      continue;
    }
    // The reference is the image's identity here: what it resolves to is the registry's to say.
    imageIds[service.name] = `ref:${ref}`;
    pulledAsNamed.push(service.name);
    options.progress?.({ service: service.name, line: `${ref}: the device pulls it as named, from the image's own registry (${adoption.why})`, summary: true });
  }
  return { project, images, imageIds, commit: commitOf(project, imageIds), pulledAsNamed };
}

/** The image's id in the engine, or undefined when the engine has no such image. */
async function imageId(docker: Docker, project: ComposeProject, service: ComposeService, ref: string): Promise<string | undefined> {
  try {
    return (await docker.getImage(ref).inspect()).Id;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return undefined;
    throw new FleetlabError('HIL_ERR_BUILD', `${project.file}: services.${service.name}: cannot inspect image "${ref}": ${errorText(err)}`);
  }
}

/** 32 hex digits over the services, their settings and image ids: what names a release. */
export function commitOf(project: ComposeProject, imageIds: Record<string, string>): string {
  const services = project.services.map((s) => ({ ...s, build: undefined, imageId: imageIds[s.name] }));
  // Networks only when declared, so a release without them keeps the commit it had before they were carried.
  const networks = project.networks.length ? { networks: project.networks } : {};
  return createHash('sha256').update(JSON.stringify({ name: project.name, volumes: project.volumes, ...networks, services })).digest('hex').slice(0, 32);
}

export interface TargetStateOptions {
  appId: number;
  /** The release id the device reports (`/v2/state/status` `release`); a new one per deploy. */
  releaseId: number;
  /** Environment added to every service, over the compose file's. */
  env?: Record<string, string>;
  deviceName?: string;
  config?: Record<string, string>;
}

/** The local-mode target state that runs `release` as app `appId`. Service and image ids follow compose order. */
export function localTargetState(release: Release, o: TargetStateOptions): WireLocalState {
  const services: Record<string, WireService> = {};
  release.project.services.forEach((s, i) => {
    const id = i + 1;
    const service: WireService = {
      serviceName: s.name,
      serviceId: id,
      imageId: id,
      image: release.images[s.name]!,
      environment: { ...s.environment, ...o.env },
      labels: s.labels,
    };
    if (s.volumes.length) service.volumes = s.volumes;
    if (s.command) service.command = s.command;
    if (s.restart) service.restart = s.restart;
    if (s.networkMode) service.network_mode = s.networkMode;
    Object.assign(service, containerSettingsToWire(s), linksToWire(s));
    services[String(id)] = service;
  });
  return {
    name: o.deviceName ?? release.project.name,
    config: { SUPERVISOR_LOCAL_MODE: '1', ...o.config },
    apps: {
      [String(o.appId)]: {
        name: release.project.name,
        commit: release.commit,
        releaseId: o.releaseId,
        services,
        volumes: Object.fromEntries(release.project.volumes.map((v) => [v, {}])),
        networks: Object.fromEntries(release.project.networks.map((n) => [n, {}])),
      },
    },
  };
}
