/**
 * The cloud's one error shape (docs/errors.md, "Cloud API responses") as a check the error,
 * fuzz and scope tests share: a JSON string body, and a catalogue code in the
 * Fleetlab-Error-Code header whose status is the response's.
 */
import { errorCatalogue, type ErrorCode } from '../../src/errors.js';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | number | undefined>;
  body: string;
}

/** Everything wrong with an error answer's shape; empty when it is in shape. A HEAD answer has headers only. */
export function errorShapeProblems(a: Answer, method = 'GET'): string[] {
  const problems: string[] = [];
  const type = String(a.headers['content-type'] ?? '');
  if (!type.startsWith('application/json')) problems.push(`content-type is "${type}", not application/json`);
  let body: unknown;
  try {
    body = method === 'HEAD' ? 'no body' : JSON.parse(a.body);
  } catch {
    problems.push(`body is not JSON: ${a.body.slice(0, 120)}`);
  }
  if (body !== undefined && (typeof body !== 'string' || body.length === 0)) problems.push(`body is not a non-empty JSON string: ${a.body.slice(0, 120)}`);
  const code = a.headers['fleetlab-error-code'];
  const entry = typeof code === 'string' && code.startsWith('CLOUD_ERR_') ? errorCatalogue[code as ErrorCode] : undefined;
  if (!entry) problems.push(`fleetlab-error-code header is ${JSON.stringify(code)}, not a CLOUD_ERR_ code`);
  else if (entry.status !== a.status) problems.push(`${String(code)} is status ${entry.status}, the answer is ${a.status}`);
  return problems;
}

/** The code and message of an answer that must be an error in shape (throws with the problems otherwise). */
export function cloudError(a: Answer): { status: number; code: string; message: string } {
  const problems = errorShapeProblems(a);
  if (problems.length) throw new Error(`not a cloud error in shape (${a.status} ${a.body.slice(0, 200)}): ${problems.join('; ')}`);
  return { status: a.status, code: String(a.headers['fleetlab-error-code']), message: JSON.parse(a.body) as string };
}
