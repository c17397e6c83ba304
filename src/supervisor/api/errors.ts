/**
 * The one place errors become HTTP responses (docs/decisions.md item 5). Errors are
 * `{"status":"failed","message":...}`, except routes marked `envelope: 'data-error'`
 * (reboot, shutdown, purge), whose errors are `{"Data":"","Error":...}`. Bad input never
 * yields a 5xx.
 */
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { errorText, isFleetlabError } from '../../errors.js';

export interface RouteOptions {
  /** open: no key; key: device or scoped key; local: open while in local mode, else key. */
  auth: 'open' | 'key' | 'local';
  envelope?: 'status' | 'data-error';
}

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: RouteOptions['auth'];
    envelope?: RouteOptions['envelope'];
  }
}

/** A refused key is answered alike on every route (docs/decisions.md item 2), purge included. */
function errorBody(request: FastifyRequest, status: number, message: string): object {
  return request.routeOptions.config.envelope === 'data-error' && status !== 401
    ? { Data: '', Error: message }
    : { status: 'failed', message };
}

function statusAndMessage(err: FastifyError | Error): { status: number; message: string } {
  if (isFleetlabError(err)) return { status: err.statusCode, message: err.message };
  const fastifyError = err as FastifyError;
  if (fastifyError.validation) {
    const extra = fastifyError.validation[0]?.params?.additionalProperty;
    return { status: 400, message: extra ? `${fastifyError.message}: "${String(extra)}"` : fastifyError.message };
  }
  if (fastifyError.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
    return { status: 400, message: 'Content-Type must be application/json' };
  }
  const status = fastifyError.statusCode;
  if (status !== undefined && status >= 400 && status < 500) return { status: 400, message: fastifyError.message };
  return { status: 500, message: errorText(err) };
}

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const { status, message } = statusAndMessage(err);
    if (status >= 500) request.log.error({ err }, 'request failed');
    void reply.code(status).type('application/json').send(errorBody(request, status, message));
  });
  app.setNotFoundHandler((request, reply) => {
    void reply.code(404).send({ status: 'failed', message: `Not found: ${request.method} ${request.url.split('?')[0]}` });
  });
}

/**
 * What fastify answers itself, outside the error handler, in the same body: a URL it cannot
 * decode or route (`frameworkErrors`), and bytes that are not HTTP at all (`clientErrorHandler`,
 * written on the socket, as there is no request). Given to the server's options.
 */
export const frameworkErrorOptions: Pick<FastifyServerOptions, 'frameworkErrors' | 'clientErrorHandler'> = {
  frameworkErrors: (err, _request, reply) => {
    const { status, message } = statusAndMessage(err);
    void (reply as FastifyReply).code(status).type('application/json').send({ status: 'failed', message });
  },
  clientErrorHandler: (err: Error & { code?: string }, socket: Socket) => {
    // The client has gone: nothing to answer.
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const [status, reason, message] =
      err.code === 'HPE_HEADER_OVERFLOW' ? [431, 'Request Header Fields Too Large', 'Request headers are too large']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? [408, 'Request Timeout', 'The request was not received in time']
      : [400, 'Bad Request', `Malformed HTTP request${err.code ? ` (${err.code})` : ''}`];
    const body = JSON.stringify({ status: 'failed', message });
    if (socket.writable) {
      socket.write(`HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    }
    socket.destroy(err);
  },
};
