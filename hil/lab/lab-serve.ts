/**
 * `fleetlab lab serve`: the lab page (./lab-page.ts) and its data over HTTP, read from the
 * lease store on every request, so every host serving one store shows the same lab. Read-only
 * unless started with an admin key: then `online` and `release` are open to a request bearing
 * it, and logged with the page as who did it. Errors go through the supervisor API's one
 * mapping (src/supervisor/api/errors.ts).
 */
import { timingSafeEqual } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { FleetlabError, notFound } from '../../src/errors.js';
import { frameworkErrorOptions, installErrorHandling } from '../../src/supervisor/api/errors.js';
import type { Lab } from './lab-file.js';
import type { LeaseStore, StoredCheck } from './lease-store.js';
import { renderLabPage } from './lab-page.js';
import { labView, type LabView } from './lab-view.js';

/** The variable `lab serve` reads its admin key from (a flag would show it in `ps`). */
export const LAB_ADMIN_KEY_VARIABLE = 'FLEETLAB_LAB_ADMIN_KEY';

/** Checks shown per board, and lease events on the page. */
const CHECKS_SHOWN = 5;
const LOG_SHOWN = 20;

export interface LabServerOptions {
  /** Absent: read-only. */
  readonly adminKey?: string;
}

/** The lab's state now, as the page draws it. */
export async function readLabView(store: LeaseStore, lab: Lab, admin: boolean): Promise<LabView> {
  const [now, leases, out, log, perBoard, counts] = await Promise.all([
    store.clock(),
    store.current(),
    store.offline(),
    store.latest(LOG_SHOWN),
    Promise.all(lab.boards.map(async (b) => [b.name, await store.checks(b.name, CHECKS_SHOWN)] as const)),
    store.boardCounts(lab.flakes.runs),
  ]);
  return labView(lab, { now, leases, out, log, counts, checks: new Map<string, readonly StoredCheck[]>(perBoard) }, admin);
}

const sameKey = (given: string, key: string) => {
  const a = Buffer.from(given);
  const b = Buffer.from(key);
  return a.length === b.length && timingSafeEqual(a, b);
};

/** The page's app; the caller listens (and closes it before the store). */
export function buildLabServer(store: LeaseStore, lab: Lab, opts: LabServerOptions = {}): FastifyInstance {
  const app = Fastify({ logger: false, ...frameworkErrorOptions });
  installErrorHandling(app);
  const admin = (request: FastifyRequest): string => {
    if (!opts.adminKey) throw new FleetlabError('SUP_ERR_UNAUTHORIZED', `this lab page is read-only: it was started without ${LAB_ADMIN_KEY_VARIABLE}`);
    const given = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1] ?? '';
    if (!sameKey(given, opts.adminKey)) throw new FleetlabError('SUP_ERR_UNAUTHORIZED', 'Unauthorized: wrong or missing admin key');
    return `lab page (${request.ip})`;
  };
  const boardNamed = (name: string) => {
    if (!lab.boards.some((b) => b.name === name)) throw notFound(`no board called ${name} in ${lab.source}`);
    return name;
  };
  app.get('/', async (_request, reply) => reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(renderLabPage()));
  app.get('/api/state', async (_request, reply) => reply.header('cache-control', 'no-store').send(await readLabView(store, lab, opts.adminKey !== undefined)));
  const params = { type: 'object', properties: { board: { type: 'string', maxLength: 200 } }, required: ['board'] } as const;
  app.post<{ Params: { board: string } }>('/api/boards/:board/online', { schema: { params } }, async (request) => {
    const by = admin(request);
    const board = boardNamed(request.params.board);
    return { message: (await store.markOnline(board, by)) ? `${board} is back in the lab (logged as online by ${by})` : `${board} was not offline` };
  });
  app.post<{ Params: { board: string } }>('/api/boards/:board/release', { schema: { params } }, async (request) => {
    const by = admin(request);
    const board = boardNamed(request.params.board);
    const ended = await store.forceRelease(board, by);
    return { message: ended ? `${board}: ended the lease of ${ended.holder} (logged as forced by ${by})` : `${board} is free` };
  });
  return app;
}
