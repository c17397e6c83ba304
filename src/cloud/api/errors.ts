/**
 * The one place cloud errors become responses (docs/decisions.md item 17, docs/errors.md "Cloud
 * API"). Every error answer has one shape: a JSON string with the message as the body, and
 * the catalogue code in the `Fleetlab-Error-Code` header. The body stays a bare JSON string
 * because that is what the reference answers and what its clients read: pinejs-client's
 * `upsert` tests a 409's body against /unique/, which an object would never match. The code
 * goes in a header so a client can tell apart what shares a status (401: no key, or a key
 * that may not do this; 409: unique, or still referenced) without parsing prose.
 *
 * Database errors are recognised here, through the dialect, so both databases give the same
 * answer and no route has to remember to translate them.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { errorText, FleetlabError, isFleetlabError } from '../../errors.js';
import type { Dialect } from '../db/dialect.js';

export const ERROR_CODE_HEADER = 'fleetlab-error-code';

/** A constraint error or refused value from the database, as a FleetlabError; anything else unchanged. */
export function constraintError(dialect: Dialect, err: unknown, method: string): unknown {
  if (dialect.isDataException(err)) return new FleetlabError('CLOUD_ERR_BAD_REQUEST', `The database refused a value: ${errorText(err)}`, { cause: err });
  const v = dialect.constraintViolation(err);
  if (!v) return err;
  if (v.kind === 'unique') {
    const names = v.columns.map((c) => `"${c}"`);
    const text = names.length ? `${names.join(' and ')} must be unique.` : 'A unique field must be unique.';
    return new FleetlabError('CLOUD_ERR_UNIQUE', text, { cause: err });
  }
  // the model's own checks name a missing field first; this is the floor under them
  if (v.kind === 'not-null') return new FleetlabError('CLOUD_ERR_BAD_REQUEST', `${v.columns.length ? v.columns.join(', ') : 'A field'} is required (it cannot be null)`, { cause: err });
  if (method === 'DELETE') return new FleetlabError('CLOUD_ERR_REFERENCED', 'The record is still referenced by another record.', { cause: err });
  return new FleetlabError('CLOUD_ERR_BAD_REQUEST', 'A link names a record that does not exist.', { cause: err });
}

/** Any thrown value as a cloud error: ours as is, the database's and fastify's by kind. */
export function asCloudError(err: unknown, dialect: Dialect, method: string): FleetlabError {
  if (isFleetlabError(err)) return err;
  const mapped = constraintError(dialect, err, method);
  if (isFleetlabError(mapped)) return mapped;
  // fastify's own 4xx (schema validation, body parser, body too large, bad URL) are the caller's input.
  const status = (err as Partial<FastifyError> | null)?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) return new FleetlabError('CLOUD_ERR_BAD_REQUEST', errorText(err), { cause: err });
  return new FleetlabError('CLOUD_ERR_INTERNAL', errorText(err), { cause: err });
}

/** The status, headers and body of an error answer; also what the tunnel writes on a raw socket. */
export function errorResponse(err: FleetlabError): { status: number; headers: Record<string, string>; body: string } {
  return {
    status: err.statusCode,
    headers: { 'content-type': 'application/json; charset=utf-8', [ERROR_CODE_HEADER]: err.code },
    body: JSON.stringify(err.message),
  };
}

/** Where 5xx answers are told: the operator's only sign that a write failed. */
export interface CloudErrorLog {
  warn(message: string): void;
}

function send(request: FastifyRequest, reply: FastifyReply, err: FleetlabError, log?: CloudErrorLog): void {
  if (err.statusCode >= 500) log?.warn(`${request.method} ${request.url.split('?')[0]}: ${err.statusCode} ${err.code}: ${err.message}`);
  const r = errorResponse(err);
  void reply.code(r.status).headers(r.headers).send(r.body);
}

/**
 * For the Fastify constructor's `frameworkErrors`: a URL the router cannot decode is answered
 * before any handler runs, in fastify's own object shape unless we take it here.
 */
export function cloudFrameworkErrors(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  send(request, reply, new FleetlabError('CLOUD_ERR_BAD_REQUEST', `Malformed URL: ${error.message}`, { cause: error }));
}

export function installCloudErrors(app: FastifyInstance, dialect: Dialect, log?: CloudErrorLog): void {
  app.setErrorHandler((err: FastifyError, request, reply) => send(request, reply, asCloudError(err, dialect, request.method), log));
  app.setNotFoundHandler((request, reply) => {
    send(request, reply, new FleetlabError('CLOUD_ERR_NOT_FOUND', `Not found: ${request.method} ${request.url.split('?')[0]}`));
  });
}
