/**
 * Resolving an image from a real registry on this host's loopback (Distribution API v2 over
 * plain HTTP, as dockerd talks to a loopback registry): the tag's manifest, then its config
 * blob, turned into the `ResolvedImage` the pull plays. That is how a release fleetlab pushed
 * to its own registry (hil/release/registry.ts) reaches a device on the simulated engine.
 *
 * Only metadata moves: the layers are never downloaded, since nothing runs their files;
 * pull.ts plays their sizes over the simulated link as it does for the catalogue.
 * Failures carry dockerd 20.10's status and text (moby distribution/errors.go), because the
 * supervisor reports them to people as the engine words them.
 */
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { errorText } from '../../src/errors.js';
import { EngineApiError, serverError } from './api-error.js';
import type { ImageConfig } from './model.js';
import type { ResolvedImage } from './registry.js';

const MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const MANIFEST_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';
const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
const DEFAULT_ENV = ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'];

/** A reference whose registry is on loopback: `<domain>/<path>:<tag>`. */
export interface LoopbackRef {
  /** As written: `127.0.0.1:5000`, `localhost:5000`, `[::1]:5000`. */
  domain: string;
  /** What to connect to: `localhost` dials 127.0.0.1, which is where fleetlab's registry listens. */
  dial: string;
  /** The repository path inside the registry (`project/service`). */
  path: string;
  tag: string;
}

/**
 * The loopback registry a normalised `repo:tag` names, or undefined for any other reference
 * (Docker Hub names, outside registries, digests): the simulated engine reaches no outside
 * registry, so those stay with the simulated catalogue.
 */
export function loopbackRef(ref: string): LoopbackRef | undefined {
  if (ref.includes('@')) return undefined;
  const m = /^(127(?:\.\d{1,3}){3}|localhost|\[::1\]):(\d{1,5})\/([^:]+):([\w][\w.-]{0,127})$/.exec(ref);
  if (!m) return undefined;
  const [, host, port, path, tag] = m as unknown as [string, string, string, string, string];
  return { domain: `${host}:${port}`, dial: `${host === 'localhost' ? '127.0.0.1' : host}:${port}`, path, tag };
}

interface Descriptor {
  mediaType?: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string; variant?: string };
}

interface Manifest {
  schemaVersion?: number;
  mediaType?: string;
  config?: Descriptor;
  layers?: Descriptor[];
  manifests?: Descriptor[];
}

interface ConfigBlob {
  created?: string;
  config?: Partial<ImageConfig> | null;
}

/** One answered HTTP GET, body read. */
export interface HttpAnswer {
  status: number;
  statusText: string;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

export type HttpGet = (url: string, headers: Record<string, string>, timeoutMs: number) => Promise<HttpAnswer>;

/**
 * GET with node:http rather than fetch: fetch refuses some ports outright ("bad port", e.g. 9
 * or 6000) where dockerd would dial, and its errors hide the socket's code under `cause`.
 */
export const httpGet: HttpGet = (url, headers, timeoutMs) =>
  new Promise((resolveGet, reject) => {
    const req = request(url, { method: 'GET', headers, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolveGet({ status: res.statusCode ?? 0, statusText: res.statusMessage ?? '', headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })));
    req.on('error', reject);
    req.end();
  });

export interface RegistryClientDeps {
  get?: HttpGet;
  /** Per request; dockerd's own dial and header timeouts are in this range. */
  timeoutMs?: number;
  /** The platform a manifest list is resolved for: the simulated engine's. */
  platform?: { os: string; architecture: string };
}

export class RegistryClient {
  private readonly http: HttpGet;
  private readonly timeoutMs: number;
  private readonly platform: { os: string; architecture: string };

  constructor(deps: RegistryClientDeps = {}) {
    this.http = deps.get ?? httpGet;
    this.timeoutMs = deps.timeoutMs ?? 15_000;
    this.platform = deps.platform ?? { os: 'linux', architecture: 'amd64' };
  }

  /** Resolves `ref` (normalised `repo:tag`) from its loopback registry; throws dockerd's error. */
  async resolve(ref: string, at: LoopbackRef): Promise<ResolvedImage> {
    const base = `http://${at.dial}/v2/`;
    // dockerd pings /v2/ first, so a registry that is down fails there, with that URL.
    const ping = await this.get(at, base, {});
    if (ping.status === 401) throw serverError(`Get "http://${at.domain}/v2/": unauthorized: authentication required (the simulated engine pulls only from a registry without authentication)`);

    const tagged = await this.manifest(ref, at, at.tag);
    let { manifest } = tagged;
    if (tagged.mediaType === MANIFEST_LIST || tagged.mediaType === OCI_INDEX) {
      const { os, architecture } = this.platform;
      const entry = (manifest.manifests ?? []).find((d) => d.platform?.os === os && d.platform?.architecture === architecture);
      if (!entry) throw new EngineApiError(404, `no matching manifest for ${os}/${architecture} in the manifest list entries`);
      const chosen = await this.manifest(ref, at, entry.digest);
      if (chosen.mediaType !== MANIFEST && chosen.mediaType !== OCI_MANIFEST) throw serverError(`${ref}: the manifest list entry for ${os}/${architecture} is a ${chosen.mediaType}, not an image manifest`);
      manifest = chosen.manifest;
    } else if (tagged.mediaType !== MANIFEST && tagged.mediaType !== OCI_MANIFEST) {
      throw serverError(`${ref}: unsupported manifest media type ${JSON.stringify(tagged.mediaType)} (the simulated engine reads ${MANIFEST} and ${OCI_MANIFEST})`);
    }
    if (!manifest.config?.digest || !Array.isArray(manifest.layers)) throw serverError(`${ref}: the registry's manifest has no config or layers`);

    const configRes = await this.get(at, `${base}${at.path}/blobs/${manifest.config.digest}`, {});
    if (configRes.status !== 200) throw this.failure(ref, at, configRes);
    const configBytes = configRes.body;
    // The config digest is the image id, so it must be the digest of what came back.
    if (`sha256:${createHash('sha256').update(configBytes).digest('hex')}` !== manifest.config.digest) {
      throw serverError(`filesystem layer verification failed for digest ${manifest.config.digest}`);
    }
    const blob = parseJson<ConfigBlob>(configBytes, `${ref}: image config`);
    const c = blob.config ?? {};
    const config: ImageConfig = {
      Cmd: c.Cmd ?? null,
      Entrypoint: c.Entrypoint ?? null,
      Env: c.Env ?? DEFAULT_ENV,
      Labels: c.Labels ?? null,
      WorkingDir: c.WorkingDir ?? '',
      // A HEALTHCHECK the image was built with applies to its containers, as in dockerd.
      ...(c.Healthcheck ? { Healthcheck: c.Healthcheck } : {}),
    };
    return {
      ref,
      layers: manifest.layers.map((l) => ({ digest: l.digest, size: l.size })),
      config,
      id: manifest.config.digest,
      digest: tagged.digest,
      created: blob.created ?? new Date(0).toISOString(),
    };
  }

  /** A manifest by tag or digest, with its media type and digest. */
  private async manifest(ref: string, at: LoopbackRef, reference: string): Promise<{ manifest: Manifest; mediaType: string; digest: string }> {
    const res = await this.get(at, `http://${at.dial}/v2/${at.path}/manifests/${reference}`, { Accept: [MANIFEST, OCI_MANIFEST, MANIFEST_LIST, OCI_INDEX].join(', ') });
    if (res.status !== 200) throw this.failure(ref, at, res);
    const bytes = res.body;
    const manifest = parseJson<Manifest>(bytes, `${ref}: manifest`);
    const mediaType = manifest.mediaType ?? header(res, 'content-type')?.split(';')[0]?.trim() ?? '';
    const digest = header(res, 'docker-content-digest') ?? `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    return { manifest, mediaType, digest };
  }

  /** GET, following a redirect within the same registry (blob storage elsewhere is out of reach). */
  private async get(at: LoopbackRef, url: string, headers: Record<string, string>): Promise<HttpAnswer> {
    let target = url;
    for (let hops = 0; ; hops++) {
      let res: HttpAnswer;
      try {
        res = await this.http(target, headers, this.timeoutMs);
      } catch (err) {
        throw serverError(`Get "${target.replace(`//${at.dial}/`, `//${at.domain}/`)}": ${transportError(err, at)}`);
      }
      const location = header(res, 'location');
      if (res.status < 300 || res.status >= 400 || !location || hops >= 5) return res;
      const next = new URL(location, target);
      if (next.host !== new URL(url).host) throw serverError(`Get "${target}": the registry redirects to ${next.origin}, which the simulated engine does not reach`);
      target = next.href;
    }
  }

  /** A registry's error answer in dockerd's words (translatePullError). */
  private failure(ref: string, at: LoopbackRef, res: HttpAnswer): EngineApiError {
    const text = res.body.toString('utf8');
    let first: { code?: string; message?: string } | undefined;
    try {
      first = (JSON.parse(text) as { errors?: Array<{ code?: string; message?: string }> }).errors?.[0];
    } catch {
      first = undefined;
    }
    const repo = `${at.domain}/${at.path}`;
    // errcode.Error's text: the code in lower case with spaces, then the registry's message.
    const cause = first?.code ? `${first.code.toLowerCase().replace(/_/g, ' ')}: ${first.message ?? ''}` : '';
    switch (first?.code) {
      case 'MANIFEST_UNKNOWN':
        return new EngineApiError(404, `manifest for ${ref} not found: ${cause}`);
      case 'NAME_UNKNOWN':
        return new EngineApiError(404, `repository ${repo} not found: ${cause}`);
      case 'DENIED':
        return new EngineApiError(404, `pull access denied for ${repo}, repository does not exist or may require 'docker login': ${cause}`);
      default:
        return serverError(cause || `received unexpected HTTP status: ${res.status} ${res.statusText}`);
    }
  }
}

function header(res: HttpAnswer, name: string): string | undefined {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function parseJson<T>(bytes: Buffer, what: string): T {
  try {
    return JSON.parse(bytes.toString('utf8')) as T;
  } catch (err) {
    throw serverError(`${what} is not JSON: ${errorText(err)}`);
  }
}

/** A socket error in Go's net/http words: `dial tcp 127.0.0.1:5000: connect: connection refused`. */
function transportError(err: unknown, at: LoopbackRef): string {
  const dial = `dial tcp ${at.dial}`;
  switch ((err as NodeJS.ErrnoException)?.code) {
    case 'ECONNREFUSED':
      return `${dial}: connect: connection refused`;
    case 'EHOSTUNREACH':
      return `${dial}: connect: no route to host`;
    case 'ETIMEDOUT':
      return 'net/http: request canceled while waiting for connection (Client.Timeout exceeded while awaiting headers)';
    case 'ECONNRESET':
      return 'EOF';
    default:
      return errorText(err);
  }
}
