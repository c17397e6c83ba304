/**
 * A WebSocket upgrade request as a device sends one, read as a plain HTTP answer: what the
 * cloud says when it refuses a tunnel (a 101 rejects: the test expected a refusal).
 */
import { request as httpRequest } from 'node:http';
import type { Answer } from './cloud-error-shape.js';

export function upgradeAnswer(base: string, path: string, key: string): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, {
      headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', authorization: `Bearer ${key}` },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      reject(new Error(`${path} was upgraded`));
    });
    req.on('error', reject);
    req.end();
  });
}
