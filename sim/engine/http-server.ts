/**
 * The Engine API over HTTP: routes (versioned `/v1.NN/...` and unversioned) mapped onto the
 * SimEngine, with dockerd's status codes, headers and error bodies, plus the `/_sim/` control
 * routes (control.ts). Node's http server, so streams (pull progress, logs, events, wait)
 * are written as they happen.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { badParameter, EngineApiError, serverError, noSpace } from './api-error.js';
import { NotModified, type SimEngine, type CreateContainerBody } from './engine.js';
import { eventFilterNames, eventMatches, type EngineEvent } from './events.js';
import { labelsMatch, parseFilters } from './filters.js';
import { frame, type LogLine } from './logs.js';
import type { CreateNetworkBody } from './network-store.js';
import type { CreateVolumeBody } from './volume-store.js';
import { isoAt, normaliseRef } from './model.js';
import { pullImage, type Link } from './pull.js';
import type { SimRegistry } from './registry.js';
import { loopbackRef, type RegistryClient } from './registry-client.js';
import type { FaultSet } from './scenario.js';
import { parseSignal } from './sim-process.js';
import { containerInspect, containerSummary, imageInspect, imageSummary, networkView, volumeView } from './views.js';

export const API_VERSION = '1.41';
export const ENGINE_VERSION = '20.10.24+fleetlab-sim';

export interface HttpDeps {
  engine: () => SimEngine;
  registry: SimRegistry;
  /** Resolves what the catalogue lacks from a real registry on loopback (registry-client.ts). */
  registryClient: RegistryClient;
  faults: FaultSet;
  link: Link;
  /** Handles `/_sim/...`; returns false when no control route matched. */
  control: (req: IncomingMessage, res: ServerResponse, path: string, body: () => Promise<unknown>) => Promise<boolean>;
}

type Ctx = { deps: HttpDeps; e: () => SimEngine; req: IncomingMessage; res: ServerResponse; q: URLSearchParams; params: string[]; body: () => Promise<unknown> };
type Handler = (ctx: Ctx) => Promise<void> | void;

const HEADERS = {
  'Api-Version': API_VERSION,
  'Docker-Experimental': 'false',
  Ostype: 'linux',
  Server: `Docker/${ENGINE_VERSION} (linux)`,
};

function send(res: ServerResponse, status: number, body?: unknown): void {
  if (res.headersSent) return void res.end();
  if (body === undefined) {
    res.writeHead(status, HEADERS).end();
    return;
  }
  const text = `${JSON.stringify(body)}\n`;
  res.writeHead(status, { ...HEADERS, 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) }).end(text);
}

/** Starts a streamed response; headers go out at once, as dockerd flushes them. */
function stream(res: ServerResponse, contentType?: string): void {
  res.writeHead(200, { ...HEADERS, ...(contentType ? { 'Content-Type': contentType } : {}) });
  res.flushHeaders();
}

const bool = (v: string | null) => v === '1' || v === 'true' || v === 'True';

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const raw = await readBody(req);
  if (raw.length === 0) return {};
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw badParameter(`invalid JSON: ${(err as Error).message}`);
  }
}

/** Seconds since the epoch from a `since`/`until` value (unix seconds, fractional, or RFC 3339). */
function epochSeconds(v: string | null): number | undefined {
  if (v === null || v === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(v)) return Number(v);
  const t = Date.parse(v);
  if (Number.isNaN(t)) throw badParameter(`failed to parse value as time or duration: "${v}"`);
  return t / 1000;
}

/**
 * `k=v k2="v 2"` as a Dockerfile's ENV and LABEL read it: words split at unquoted blanks,
 * double quotes grouping (with \", \\ and \$ inside; no variable is expanded), a word split at its first unquoted `=`.
 */
function keyValues(text: string): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  let i = 0;
  while (i < text.length) {
    while (i < text.length && /\s/.test(text[i]!)) i++;
    if (i >= text.length) break;
    let key = '';
    let value: string | undefined;
    let quoted = false;
    for (; i < text.length && (quoted || !/\s/.test(text[i]!)); i++) {
      const ch = text[i]!;
      if (ch === '"') quoted = !quoted;
      else if (quoted && ch === '\\' && ['"', '\\', '$'].includes(text[i + 1] ?? '')) {
        i++;
        if (value === undefined) key += text[i];
        else value += text[i];
      } else if (!quoted && ch === '=' && value === undefined) value = '';
      else if (value === undefined) key += ch;
      else value += ch;
    }
    if (quoted) throw badParameter(`dockerfile parse error: unmatched quote in ${JSON.stringify(text)}`);
    if (value === undefined) throw badParameter(`dockerfile parse error: ${JSON.stringify(key)} has no =value`);
    pairs.push([key, value]);
  }
  return pairs;
}

/** Applies `changes` of an import (CMD, ENTRYPOINT, ENV, WORKDIR, LABEL) to an image config. */
function applyChanges(changes: string[]) {
  const config = { Cmd: null as string[] | null, Entrypoint: null as string[] | null, Env: null as string[] | null, Labels: null as Record<string, string> | null, WorkingDir: '' };
  const argv = (rest: string) => (rest.trim().startsWith('[') ? (JSON.parse(rest) as string[]) : ['/bin/sh', '-c', rest.trim()]);
  for (const change of changes) {
    const m = /^\s*(\w+)\s+([\s\S]*)$/.exec(change);
    if (!m) throw badParameter(`dockerfile parse error: ${change}`);
    const [, instr, rest] = m as unknown as [string, string, string];
    switch (instr.toUpperCase()) {
      case 'CMD':
        config.Cmd = argv(rest);
        break;
      case 'ENTRYPOINT':
        config.Entrypoint = argv(rest);
        break;
      case 'ENV':
        config.Env = [...(config.Env ?? []), ...(/^\s*[^\s=]+\s*=/.test(rest) ? keyValues(rest).map(([k, v]) => `${k}=${v}`) : [rest.trim().replace(/\s+/, '=')])];
        break;
      case 'WORKDIR':
        config.WorkingDir = rest.trim();
        break;
      case 'LABEL':
        config.Labels = { ...(config.Labels ?? {}), ...Object.fromEntries(keyValues(rest)) };
        break;
      default:
        throw badParameter(`${instr} is not a valid change command`);
    }
  }
  return config;
}

const seg = '([^/]+)';
const name = '(.+)';

/** Answers a change only once it is on disk, as dockerd does: an acknowledged change survives a kill -9. */
async function saved(e: () => SimEngine, res: ServerResponse, status: number, body?: unknown): Promise<void> {
  await e().save();
  send(res, status, body);
}

/**
 * The engine API's routes, built once and shared by every engine of the process (a fleet runs
 * thousands): each handler finds its engine in the request's context.
 */
const ROUTES: ReadonlyArray<readonly [string, RegExp, Handler]> = [
  ['GET', /^\/_ping$/, ({ res }) => void res.writeHead(200, { ...HEADERS, 'Content-Type': 'text/plain; charset=utf-8', 'Cache-Control': 'no-cache, no-store, must-revalidate', Pragma: 'no-cache' }).end('OK')],
  ['HEAD', /^\/_ping$/, ({ res }) => void res.writeHead(200, { ...HEADERS, 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': 0 }).end()],
  ['GET', /^\/version$/, ({ res }) =>
    send(res, 200, {
      Platform: { Name: 'fleetlab simulated engine' },
      Components: [{ Name: 'Engine', Version: ENGINE_VERSION, Details: { ApiVersion: API_VERSION, MinAPIVersion: '1.12', Os: 'linux', Arch: 'amd64' } }],
      Version: ENGINE_VERSION, ApiVersion: API_VERSION, MinAPIVersion: '1.12', GitCommit: 'sim', GoVersion: 'none', Os: 'linux', Arch: 'amd64',
      KernelVersion: process.platform === 'linux' ? 'sim' : 'sim', BuildTime: '2026-01-01T00:00:00.000000000+00:00',
    })],
  ['GET', /^\/info$/, ({ e, res }) => {
    const c = e().counts();
    send(res, 200, {
      ID: 'FLEETLAB:SIM', Containers: c.containers, ContainersRunning: c.running, ContainersPaused: 0, ContainersStopped: c.stopped, Images: c.images,
      Driver: 'sim', DriverStatus: [], DockerRootDir: e().dataDir, Name: 'fleetlab-sim-engine', ServerVersion: ENGINE_VERSION, OperatingSystem: 'fleetlab simulated engine',
      OSType: 'linux', OSVersion: '', Architecture: 'x86_64', KernelVersion: 'sim', NCPU: 1, MemTotal: 1 << 30, IndexServerAddress: 'https://index.docker.io/v1/',
      LoggingDriver: 'json-file', CgroupDriver: 'none', CgroupVersion: '2', Plugins: { Volume: ['local'], Network: ['bridge', 'host', 'null'], Log: ['json-file'] },
      MemoryLimit: false, SwapLimit: false, IPv4Forwarding: true, Debug: false, NFd: 0, NGoroutines: 0, SystemTime: isoAt(e().clock()), LiveRestoreEnabled: false,
      RegistryConfig: { IndexConfigs: {}, InsecureRegistryCIDRs: ['127.0.0.0/8'], Mirrors: [] }, SecurityOptions: [], Warnings: null, Labels: [], ExperimentalBuild: false,
      HttpProxy: '', HttpsProxy: '', NoProxy: '', Swarm: { LocalNodeState: 'inactive', NodeID: '', NodeAddr: '', ControlAvailable: false, Error: '', RemoteManagers: null },
    });
  }],

  /* images */
  ['GET', /^\/images\/json$/, ({ e, res, q }) => {
    const f = parseFilters(q.get('filters'), ['label', 'reference', 'dangling', 'before', 'since']);
    // Every image is top-level here (no build layers), so `all` changes nothing.
    const images = e().images.records().filter(
      (i) =>
        labelsMatch(f, i.config.Labels) &&
        (!f.has('dangling') || (f.get('dangling')![0] === 'true') === (i.repoTags.length === 0)) &&
        (!f.has('reference') || f.get('reference')!.some((r) => i.repoTags.some((t) => t === normaliseRef(r) || t.startsWith(`${r}:`)))),
    );
    send(res, 200, images.map(imageSummary));
  }],
  ['POST', /^\/images\/create$/, (ctx) => createImage(ctx.deps, ctx)],
  ['GET', new RegExp(`^/images/${name}/json$`), ({ e, res, params }) => send(res, 200, imageInspect(e().images.inspect(params[0]!)))],
  ['POST', new RegExp(`^/images/${name}/tag$`), async ({ e, res, params, q }) => {
    e().images.tag(params[0]!, q.get('repo') ?? '', q.get('tag'));
    await saved(e, res, 201);
  }],
  ['DELETE', new RegExp(`^/images/${name}$`), async ({ e, res, params, q }) => saved(e, res, 200, e().images.remove(params[0]!, bool(q.get('force'))))],

  /* containers */
  ['GET', /^\/containers\/json$/, ({ e, res, q }) => {
    const f = parseFilters(q.get('filters'), ['label', 'name', 'id', 'status', 'ancestor', 'network', 'volume', 'exited', 'before', 'since', 'health', 'isolation', 'publish', 'expose', 'is-task']);
    let list = e().listContainers(bool(q.get('all')), f);
    const limit = Number(q.get('limit') ?? -1);
    if (limit > 0) list = list.slice(0, limit);
    send(res, 200, list.map((c) => containerSummary(e(), c)));
  }],
  ['POST', /^\/containers\/create$/, async ({ e, res, q, body }) => {
    const c = e().createContainer(q.get('name'), (await body()) as CreateContainerBody);
    await saved(e, res, 201, { Id: c.id, Warnings: [] });
  }],
  ['GET', new RegExp(`^/containers/${seg}/json$`), ({ e, res, params }) => send(res, 200, containerInspect(e(), e().findContainer(params[0]!)))],
  ['POST', new RegExp(`^/containers/${seg}/start$`), async ({ e, res, params }) => {
    e().start(params[0]!);
    await saved(e, res, 204);
  }],
  ['POST', new RegExp(`^/containers/${seg}/stop$`), async ({ e, res, params, q }) => {
    const t = q.get('t');
    await e().stop(params[0]!, t === null ? undefined : Number(t));
    await saved(e, res, 204);
  }],
  ['POST', new RegExp(`^/containers/${seg}/restart$`), async ({ e, res, params, q }) => {
    const t = q.get('t');
    await e().restart(params[0]!, t === null ? undefined : Number(t));
    await saved(e, res, 204);
  }],
  ['POST', new RegExp(`^/containers/${seg}/kill$`), async ({ e, res, params, q }) => {
    const signal = parseSignal(q.get('signal'));
    if (!signal) throw badParameter(`Invalid signal: ${q.get('signal')}`);
    e().kill(params[0]!, signal);
    await saved(e, res, 204);
  }],
  ['DELETE', new RegExp(`^/containers/${seg}$`), async ({ e, res, params, q }) => {
    e().remove(params[0]!, { force: bool(q.get('force')), volumes: bool(q.get('v')) });
    await saved(e, res, 204);
  }],
  ['POST', new RegExp(`^/containers/${seg}/wait$`), async ({ e, res, params, q }) => {
    const waiting = e().wait(params[0]!, q.get('condition') ?? 'not-running');
    stream(res, 'application/json');
    const code = await waiting;
    res.end(`${JSON.stringify({ Error: null, StatusCode: code })}\n`);
  }],
  ['GET', new RegExp(`^/containers/${seg}/logs$`), (ctx) => containerLogs(ctx.deps, ctx)],

  /* volumes */
  ['GET', /^\/volumes$/, ({ e, res, q }) => send(res, 200, { Volumes: e().volumes.list(parseFilters(q.get('filters'), ['label', 'name', 'driver', 'dangling'])).map(volumeView), Warnings: null })],
  ['POST', /^\/volumes\/create$/, async ({ e, res, body }) => saved(e, res, 201, volumeView(e().volumes.create((await body()) as CreateVolumeBody)))],
  ['GET', new RegExp(`^/volumes/${seg}$`), ({ e, res, params }) => send(res, 200, volumeView(e().volumes.find(params[0]!)))],
  ['DELETE', new RegExp(`^/volumes/${seg}$`), async ({ e, res, params, q }) => {
    e().volumes.remove(params[0]!, bool(q.get('force')));
    await saved(e, res, 204);
  }],
  ['POST', /^\/volumes\/prune$/, async ({ e, res, q }) => {
    const f = parseFilters(q.get('filters'), ['label']);
    f.set('dangling', ['true']);
    const removed = e().volumes.list(f).map((v) => v.name);
    for (const v of removed) e().volumes.remove(v, true);
    await saved(e, res, 200, { VolumesDeleted: removed, SpaceReclaimed: 0 });
  }],

  /* networks */
  ['GET', /^\/networks$/, ({ e, res, q }) => send(res, 200, e().networks.list(parseFilters(q.get('filters'), ['label', 'name', 'id', 'driver', 'type', 'scope', 'dangling'])).map((n) => networkView(e(), n)))],
  ['POST', /^\/networks\/create$/, async ({ e, res, body }) => {
    const n = e().networks.create((await body()) as CreateNetworkBody);
    await saved(e, res, 201, { Id: n.id, Warning: '' });
  }],
  ['GET', new RegExp(`^/networks/${seg}$`), ({ e, res, params }) => send(res, 200, networkView(e(), e().findNetwork(params[0]!)))],
  ['DELETE', new RegExp(`^/networks/${seg}$`), async ({ e, res, params }) => {
    e().removeNetwork(params[0]!);
    await saved(e, res, 204);
  }],
  ['POST', new RegExp(`^/networks/${seg}/connect$`), async ({ e, res, params, body }) => {
    const b = (await body()) as { Container?: string; EndpointConfig?: { Aliases?: string[] | null } };
    e().connect(params[0]!, b.Container ?? '', b.EndpointConfig?.Aliases ?? null);
    await saved(e, res, 200);
  }],
  ['POST', new RegExp(`^/networks/${seg}/disconnect$`), async ({ e, res, params, body }) => {
    const b = (await body()) as { Container?: string };
    e().disconnect(params[0]!, b.Container ?? '');
    await saved(e, res, 200);
  }],

  /* events */
  ['GET', /^\/events$/, (ctx) => eventStream(ctx.deps, ctx)],
];

async function createImage(deps: HttpDeps, { req, res, q }: Ctx): Promise<void> {
  const engine = deps.engine();
  const fromSrc = q.get('fromSrc');
  if (fromSrc !== null) {
    if (fromSrc !== '-') throw badParameter('importing from a URL is not supported by the simulated engine');
    const tar = await readBody(req);
    if (deps.faults.diskFull) throw serverError(noSpace('write /var/lib/docker/tmp/docker-import'));
    const config = applyChanges(q.getAll('changes'));
    const id = `sha256:${createHash('sha256').update(tar).update(JSON.stringify(config)).digest('hex')}`;
    const repo = q.get('repo');
    const tag = repo ? `${repo}:${q.get('tag') || 'latest'}` : null;
    engine.images.add({ id, created: isoAt(engine.clock()), size: tar.length, layers: [`sha256:${createHash('sha256').update(tar).digest('hex')}`], config }, tag, null);
    engine.events.emit('image', 'import', id, { name: id });
    if (tag) engine.events.emit('image', 'tag', id, { name: tag });
    await engine.save();
    stream(res, 'application/json');
    res.end(`${JSON.stringify({ status: id })}\n`);
    return;
  }
  const fromImage = q.get('fromImage');
  if (!fromImage) throw badParameter('fromImage or fromSrc is required');
  const tagParam = q.get('tag');
  const ref = normaliseRef(tagParam && !fromImage.includes('@') ? `${fromImage.replace(/:[^/]*$/, '')}:${tagParam}` : fromImage);
  const repo = ref.slice(0, ref.lastIndexOf(':'));
  // The catalogue first; a reference to a loopback registry the catalogue lacks is resolved
  // there (a release fleetlab pushed); any other registry is out of the simulation's reach.
  const loopback = loopbackRef(ref);
  const image = deps.registry.resolve(ref) ?? (loopback ? await deps.registryClient.resolve(ref, loopback) : undefined);
  if (!image) {
    if (!deps.registry.hasRepository(repo)) {
      throw new EngineApiError(404, `pull access denied for ${repo}, repository does not exist or may require 'docker login': denied: requested access to the resource is denied`);
    }
    throw new EngineApiError(404, `manifest for ${ref} not found: manifest unknown: manifest unknown`);
  }
  req.resume();
  stream(res, 'application/json');
  const abort = new AbortController();
  res.on('close', () => abort.abort());
  await pullImage({ engine, faults: deps.faults, link: deps.link }, image, ref, (m) => res.write(`${JSON.stringify(m)}\r\n`), abort.signal);
  res.end();
}

function containerLogs(deps: HttpDeps, { res, params, q }: Ctx): void {
  const engine = deps.engine();
  const c = engine.findContainer(params[0]!);
  const stdout = bool(q.get('stdout'));
  const stderr = bool(q.get('stderr'));
  if (!stdout && !stderr) throw badParameter('Bad parameters: you must choose at least one stream');
  const tailRaw = q.get('tail');
  const tail = tailRaw === null || tailRaw === 'all' ? undefined : Number(tailRaw);
  const opts = { timestamps: bool(q.get('timestamps')), tty: c.config.Tty };
  const since = epochSeconds(q.get('since'));
  const until = epochSeconds(q.get('until'));
  const wanted = (l: LogLine) => (l.stream === 'stdout' ? stdout : stderr);
  const book = engine.logBook(c);
  stream(res);
  for (const l of book.select({ ...(since !== undefined && since > 0 ? { sinceSec: since } : {}), ...(until !== undefined ? { untilSec: until } : {}), ...(tail !== undefined && !Number.isNaN(tail) ? { tail } : {}) })) {
    if (wanted(l)) res.write(frame(l, opts));
  }
  if (!bool(q.get('follow')) || !engine.isRunning(c)) return void res.end();
  const off = book.onLine((l) => {
    if (wanted(l) && (until === undefined || l.ms / 1000 <= until)) res.write(frame(l, opts));
  });
  const cancel = engine.onNextExit(c, () => {
    off();
    res.end();
  });
  res.on('close', () => {
    off();
    cancel();
  });
}

function eventStream(deps: HttpDeps, { res, q }: Ctx): void {
  const engine = deps.engine();
  const f = parseFilters(q.get('filters'), eventFilterNames);
  const since = epochSeconds(q.get('since'));
  const until = epochSeconds(q.get('until'));
  const write = (ev: EngineEvent) => {
    if (eventMatches(f, ev)) res.write(`${JSON.stringify(ev)}\n`);
  };
  stream(res, 'application/json');
  if (since !== undefined) for (const ev of engine.events.since(since, until ?? Infinity)) write(ev);
  if (until !== undefined && until <= engine.clock() / 1000) return void res.end();
  const off = engine.events.subscribe(write);
  const timer = until !== undefined ? setTimeout(() => res.end(), until * 1000 - engine.clock()) : undefined;
  res.on('close', () => {
    off();
    if (timer) clearTimeout(timer);
  });
}

/**
 * `POST /containers/{id}/attach` as an HTTP upgrade (how `docker run` without -d and
 * dockerode's attach reach it): answers 101, then writes the container's output (past lines
 * with `logs=1`, new ones with `stream=1`) until its current or next run ends. Stdin is not
 * read: nothing runs that could consume it.
 */
export function createUpgradeHandler(deps: HttpDeps): (req: IncomingMessage, socket: Duplex) => void {
  return (req, socket) => {
    const url = new URL(req.url ?? '/', 'http://engine');
    const path = decodeURIComponent(url.pathname).replace(/^\/v\d+\.\d+/, '');
    const m = /^\/containers\/([^/]+)\/attach$/.exec(path);
    const refuse = (status: number, message: string) => {
      const body = `${JSON.stringify({ message })}\n`;
      socket.end(`HTTP/1.1 ${status} ${status === 404 ? 'Not Found' : 'Bad Request'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    };
    if (!m || req.method !== 'POST') return refuse(404, 'page not found');
    const engine = deps.engine();
    let c;
    try {
      c = engine.findContainer(m[1]!);
    } catch (err) {
      return refuse(err instanceof EngineApiError ? err.status : 400, (err as Error).message);
    }
    const q = url.searchParams;
    const wanted = (l: LogLine) => (l.stream === 'stdout' ? bool(q.get('stdout')) : bool(q.get('stderr')));
    const opts = { timestamps: false, tty: c.config.Tty };
    socket.write(`HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.${opts.tty ? 'raw' : 'multiplexed'}-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n${HEADER_LINES}\r\n`);
    const book = engine.logBook(c);
    if (bool(q.get('logs'))) for (const l of book.select({})) if (wanted(l)) socket.write(frame(l, opts));
    if (!bool(q.get('stream'))) return void socket.end();
    const off = book.onLine((l) => {
      if (wanted(l)) socket.write(frame(l, opts));
    });
    const cancel = engine.onNextExit(c, () => {
      off();
      socket.end();
    });
    socket.on('close', () => {
      off();
      cancel();
    });
    socket.on('error', () => undefined);
    socket.resume();
  };
}

const HEADER_LINES = Object.entries(HEADERS).map(([k, v]) => `${k}: ${v}\r\n`).join('');

/** Returns the request handler: version prefix, routing, errors as dockerd sends them. */
export function createHandler(deps: HttpDeps): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://engine');
      let path = decodeURIComponent(url.pathname);
      const body = () => readJson(req);
      try {
        const version = /^\/v(\d+)\.(\d+)(\/.*)$/.exec(path);
        if (version) {
          if (Number(version[1]) > 1 || Number(version[2]) > Number(API_VERSION.split('.')[1])) {
            throw badParameter(`client version ${version[1]}.${version[2]} is too new. Maximum supported API version is ${API_VERSION}`);
          }
          path = version[3]!;
        }
        if (path.startsWith('/_sim/')) {
          if (await deps.control(req, res, path, body)) return;
          throw new EngineApiError(404, `page not found`);
        }
        for (const [method, re, handler] of ROUTES) {
          const m = re.exec(path);
          if (!m || method !== req.method) continue;
          await handler({ deps, e: deps.engine, req, res, q: url.searchParams, params: m.slice(1), body });
          return;
        }
        throw new EngineApiError(404, 'page not found');
      } catch (err) {
        if (err instanceof NotModified) return send(res, 304);
        if (err instanceof EngineApiError) return send(res, err.status, { message: err.message });
        send(res, 500, { message: (err as Error).message });
      }
    })();
  };
}


