/**
 * The one place errors become HTTP responses (DECISIONS.md item 5). Errors are
 * `{"status":"failed","message":...}`, except routes marked `envelope: 'data-error'`
 * (reboot, shutdown, purge), whose errors are `{"Data":"","Error":...}`. Bad input never
 * yields a 5xx.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
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

/** A refused key is answered alike on every route (DECISIONS.md item 2), purge included. */
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
