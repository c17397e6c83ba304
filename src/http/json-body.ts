/**
 * The JSON body parser both servers (device API, cloud API) use. An empty body reads as
 * absent, since many calls take an optional body (`{force}`, a bare POST); malformed JSON is
 * a 400 that names the parse error, so it reaches each server's one error mapper as such.
 * A bare POST from a client that labels even an empty body (busybox `wget --post-data=''`
 * sends application/x-www-form-urlencoded) is a bare POST too; a non-empty body of another
 * type is a 400 that says to send JSON.
 */
import type { FastifyInstance } from 'fastify';

export function installJsonBodyParser(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      const error = new Error(`Invalid JSON body: ${(err as Error).message}`) as Error & { statusCode: number };
      error.statusCode = 400;
      done(error, undefined);
    }
  });
  app.addContentTypeParser('*', { parseAs: 'string' }, (req, body, done) => {
    if (String(body).trim() === '') return done(null, undefined);
    const error = new Error(`Unsupported body type ${req.headers['content-type'] ?? '(none)'}: send JSON with Content-Type: application/json`) as Error & { statusCode: number };
    error.statusCode = 400;
    done(error, undefined);
  });
}
