/**
 * Serialises one journal entry in the Journal Export Format
 * (https://systemd.io/JOURNAL_EXPORT_FORMATS/), the stream systemd-journal-remote reads.
 * Field names are checked here because one bad name (a newline, a stray "=") would shift
 * every later field of the stream into the wrong entry.
 */
import { badRequest } from '../../src/errors.js';

/** Fields the sim itself sets; callers cannot forge them through `fields`. */
export type TrustedField =
  | '__REALTIME_TIMESTAMP'
  | '__MONOTONIC_TIMESTAMP'
  | '_BOOT_ID'
  | '_MACHINE_ID'
  | '_HOSTNAME'
  | '_SYSTEMD_UNIT'
  | '_PID'
  | '_TRANSPORT';

// systemd's journal_field_valid(): A-Z, 0-9, _, at most 64 chars, no leading digit.
const FIELD_NAME = /^[A-Z_][A-Z0-9_]{0,63}$/;

/** Throws badRequest naming the field when `name` is not a field a caller may set. */
export function checkUserFieldName(name: string): void {
  if (!FIELD_NAME.test(name)) {
    throw badRequest(`fields.${JSON.stringify(name)}: a journal field name is 1-64 characters of A-Z, 0-9 and _, not starting with a digit`);
  }
  if (name.startsWith('_')) {
    throw badRequest(`fields.${name}: names starting with "_" are trusted fields that only the journal sets`);
  }
}

// The text form "NAME=value\n" cannot carry a newline; control characters also go binary
// so journalctl sees exactly the bytes that were written.
const NEEDS_BINARY = /[\x00-\x08\x0a-\x1f\x7f]/;

function encodeField(name: string, value: string): Buffer {
  if (!NEEDS_BINARY.test(value)) return Buffer.from(`${name}=${value}\n`, 'utf8');
  const data = Buffer.from(value, 'utf8');
  const size = Buffer.alloc(8);
  size.writeBigUInt64LE(BigInt(data.length));
  return Buffer.concat([Buffer.from(`${name}\n`, 'utf8'), size, data, Buffer.from('\n')]);
}

/**
 * One entry as bytes, ending with the empty line that terminates it. `trusted` must only be
 * filled by the sim; `user` names are validated.
 */
export function encodeEntry(trusted: Partial<Record<TrustedField, string>>, user: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of Object.entries(trusted)) {
    if (value !== undefined) parts.push(encodeField(name, value));
  }
  for (const [name, value] of Object.entries(user)) {
    checkUserFieldName(name);
    if (typeof value !== 'string') throw badRequest(`fields.${name} must be a string`);
    parts.push(encodeField(name, value));
  }
  parts.push(Buffer.from('\n'));
  return Buffer.concat(parts);
}
