/**
 * The benches' HTTP client: JSON over keep-alive connections to one server, as little
 * work per request as node:http allows, so that what a bench measures is the server.
 */
import { Agent, request, type IncomingHttpHeaders } from 'node:http';

export interface HttpAnswer {
  status: number;
  body: string;
  headers: IncomingHttpHeaders;
}

export interface JsonClient {
  /** `headers` are added to (and may replace) the client's own, e.g. another key. */
  get(path: string, headers?: Record<string, string>): Promise<HttpAnswer>;
  post(path: string, payload: object): Promise<HttpAnswer>;
  close(): void;
}

/** A client of `baseUrl` that sends `Authorization: Bearer key` on every request. */
export function jsonClient(baseUrl: string, key: string, maxSockets = 16): JsonClient {
  const agent = new Agent({ keepAlive: true, maxSockets });
  const base = new URL(baseUrl);
  const send = (method: string, path: string, body?: string, extra?: Record<string, string>) =>
    new Promise<HttpAnswer>((resolve, reject) => {
      const headers: Record<string, string | number> = { authorization: `Bearer ${key}`, ...extra };
      if (body !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      const req = request({ agent, host: base.hostname, port: base.port, method, path, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), headers: res.headers }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });
  return {
    get: (path, headers) => send('GET', path, undefined, headers),
    post: (path, payload) => send('POST', path, JSON.stringify(payload)),
    close: () => agent.destroy(),
  };
}
