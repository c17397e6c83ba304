/**
 * ApiProtocol over plain HTTP (undici's fetch), shared by targets whose device API is
 * reachable from the harness at a URL. The key goes in `Authorization: Bearer`, the form
 * docs/decisions.md item 2 accepts next to `?apikey=` (specs that test `?apikey=` pass `key: null` and
 * the query).
 */
import { fetch, type Dispatcher, type RequestInit, type Response } from 'undici';
import { scaled } from './wait.js';
import { FleetlabError, errorText } from '../../src/errors.js';
import { until, withDeadline } from '../../src/wait.js';
import type { ApiProtocol, DeviceIdentity, HttpResponse, HttpStream, RequestOptions } from '../../device-access/protocols.js';

const DEFAULT_TIMEOUT_MS = 30_000;

export interface HttpApiOptions {
  /**
   * The connection pool to use instead of the process's shared one. A target whose device can
   * be rewound (a VM snapshot restore) gives each session its own and destroys it when the
   * session ends: a kept-alive connection from before the restore leads nowhere afterwards.
   */
  readonly dispatcher?: Dispatcher;
}

function build(base: string, method: string, path: string, options: RequestOptions, key: string, signal: AbortSignal, dispatcher: Dispatcher | undefined): [URL, RequestInit] {
  const url = new URL(path, `${base}/`);
  for (const [k, v] of Object.entries(options.query ?? {})) url.searchParams.set(k, String(v));
  const headers: Record<string, string> = { ...options.headers };
  const sendKey = options.key === undefined ? key : options.key;
  if (sendKey !== null) headers.authorization = `Bearer ${sendKey}`;
  let body: string | undefined;
  if (options.rawBody) {
    headers['content-type'] = options.rawBody.contentType;
    body = options.rawBody.data;
  } else if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  return [url, { method, headers, body, signal, ...(dispatcher ? { dispatcher } : {}) }];
}

/** A request's timeout, in words that say what it may be waiting on and how to wait longer. */
function timedOut(method: string, path: string, timeoutMs: number, err: unknown): Error {
  // Stops wait for each service's stop_grace_period (10 s unless the compose file says), and
  // an update can wait on a lock: a request may rightly take longer than the default.
  return new Error(`${method} ${path}: no answer within ${timeoutMs} ms. A stop or restart waits for each service's stop_grace_period, an update for its lock: give the request { timeoutMs } to wait longer`, { cause: err });
}

const isTimeout = (err: unknown) => err instanceof Error && err.name === 'TimeoutError';

/** fetch alone says only "fetch failed": this names the request and the socket's reason. */
async function send(method: string, path: string, request: [URL, RequestInit], timeoutMs?: number): Promise<Response> {
  try {
    return await fetch(...request);
  } catch (err) {
    if (timeoutMs !== undefined && isTimeout(err)) throw timedOut(method, path, timeoutMs, err);
    throw new Error(`${method} ${path}: ${fetchFailure(err)}`, { cause: err });
  }
}

/** Why a fetch failed, with the socket's reason its error keeps in `cause`. */
export function fetchFailure(err: unknown): string {
  const cause = err instanceof Error && err.cause instanceof Error ? (err.cause as Error & { code?: string }) : undefined;
  return cause ? `${(err as Error).message}: ${cause.message}${cause.code ? ` (${cause.code})` : ''}` : err instanceof Error ? err.message : String(err);
}

/**
 * A client for a device known only by its API's URL and key (a CLI command's `--device`, a board
 * being saved): nothing else of its identity is read through it.
 */
export function httpApiAt(url: string, apiKey: string, options: HttpApiOptions = {}): ApiProtocol {
  return httpApi({ url, apiKey, uuid: '', vendor: 'platform', lockRoot: '' }, options);
}

export function httpApi(identity: Omit<DeviceIdentity, 'apiKey'> & { apiKey: string }, { dispatcher }: HttpApiOptions = {}): ApiProtocol {
  let key = identity.apiKey;
  const current: DeviceIdentity = {
    url: identity.url,
    uuid: identity.uuid,
    vendor: identity.vendor,
    lockRoot: identity.lockRoot,
    ...(identity.hostPaths ? { hostPaths: identity.hostPaths } : {}),
    get apiKey() {
      return key;
    },
  };
  return {
    identity: current,
    useKey(next) {
      key = next;
    },
    async request(method, path, options: RequestOptions = {}): Promise<HttpResponse> {
      const timeoutMs = options.timeoutMs ?? scaled(DEFAULT_TIMEOUT_MS);
      const [res, text] = await withDeadline(timeoutMs, async (signal) => {
        const r = await send(method, path, build(identity.url, method, path, options, key, signal, dispatcher), timeoutMs);
        return [r, await r.text()] as const;
      }).catch((err: unknown) => {
        // The deadline can end the request before fetch itself says so.
        throw isTimeout(err) ? timedOut(method, path, timeoutMs, err) : err;
      });
      return {
        status: res.status,
        headers: Object.fromEntries(res.headers.entries()),
        text,
        json<T>() {
          try {
            return JSON.parse(text) as T;
          } catch {
            throw new Error(`${method} ${path}: ${res.status} body is not JSON: ${text.slice(0, 200)}`);
          }
        },
      };
    },
    async stream(method, path, options: RequestOptions = {}): Promise<HttpStream> {
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), options.timeoutMs ?? scaled(DEFAULT_TIMEOUT_MS));
      const res = await send(method, path, build(identity.url, method, path, options, key, abort.signal, dispatcher));
      const reader = res.body?.getReader();
      const decoder = new TextDecoder();
      let closed = false;
      return {
        status: res.status,
        headers: Object.fromEntries(res.headers.entries()),
        async *chunks() {
          if (!reader) return;
          try {
            while (!closed) {
              const { value, done } = await reader.read();
              if (done) return;
              yield decoder.decode(value, { stream: true });
            }
          } catch (err) {
            if (!closed) throw err;
          }
        },
        async close() {
          if (closed) return;
          closed = true;
          clearTimeout(timer);
          abort.abort();
          await reader?.cancel().catch(() => undefined);
        },
      };
    },
    async waitReady(timeoutMs = scaled(30_000)) {
      const ping = () => withDeadline(2000, (signal) => fetch(new URL('/ping', `${identity.url}/`), { signal, ...(dispatcher ? { dispatcher } : {}) }));
      await until(`the device API at ${identity.url}`, ping, (res) => res.ok, {
        timeoutMs,
        intervalMs: 100,
        fail: (f) => {
          const last = f.last === undefined ? 'no answer' : 'error' in f.last ? errorText(f.last.error) : `HTTP ${f.last.value.status}`;
          return new FleetlabError('SUP_ERR_TIMEOUT', `device API at ${identity.url} not ready within ${timeoutMs} ms (${last})`);
        },
      });
    },
  };
}
