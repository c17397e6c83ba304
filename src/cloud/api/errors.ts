/**
 * The one place cloud errors become responses (DECISIONS.md item 17). The body is a JSON
 * string with the message, as the reference answers; a unique violation reads
 * `"\"uuid\" must be unique."`, which clients test to detect an upsert conflict.
 * Database constraint errors are recognised through the dialect, so both databases give
 * the same answer.
 */
import type { FastifyError, FastifyInstance } from 'fastify';
import { errorText, FleetlabError, isFleetlabError } from '../../errors.js';
import type { Dialect } from '../db/dialect.js';

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
  if (method === 'DELETE') return new FleetlabError('CLOUD_ERR_REFERENCED', 'The record is still referenced by another record.', { cause: err });
  return new FleetlabError('CLOUD_ERR_BAD_REQUEST', 'A link names a record that does not exist.', { cause: err });
}

function statusAndMessage(err: FastifyError | Error): { status: number; message: string } {
  if (isFleetlabError(err)) return { status: err.statusCode, message: err.message };
  const status = (err as FastifyError).statusCode;
  if (status !== undefined && status >= 400 && status < 500) return { status: 400, message: err.message };
  return { status: 500, message: errorText(err) };
}

export function installCloudErrors(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    const { status, message } = statusAndMessage(err);
    if (status >= 500) request.log.error({ err }, 'request failed');
    void reply.code(status).type('application/json').send(JSON.stringify(message));
  });
  app.setNotFoundHandler((request, reply) => {
    const err = new FleetlabError('CLOUD_ERR_NOT_FOUND', `Not found: ${request.method} ${request.url.split('?')[0]}`);
    void reply.code(err.statusCode).type('application/json').send(JSON.stringify(err.message));
  });
}
