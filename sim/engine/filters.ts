/**
 * The `filters` query parameter of list and events calls: JSON, either
 * `{"label":["k=v"]}` or the older `{"label":{"k=v":true}}`. Unknown filter names are a 400,
 * as in dockerd.
 */
import { badParameter } from './api-error.js';

export type Filters = Map<string, string[]>;

export function parseFilters(raw: string | null, allowed: readonly string[]): Filters {
  const out: Filters = new Map();
  if (!raw) return out;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw badParameter(`invalid filter: ${raw}`);
  }
  if (!parsed || typeof parsed !== 'object') throw badParameter(`invalid filter: ${raw}`);
  for (const [key, value] of Object.entries(parsed as Record<string, unknown>)) {
    if (!allowed.includes(key)) throw badParameter(`invalid filter '${key}'`);
    const values = Array.isArray(value) ? value.map(String) : value && typeof value === 'object' ? Object.keys(value) : [String(value)];
    out.set(key, values);
  }
  return out;
}

/** `label=k` matches any value; `label=k=v` that value. Every label filter must match. */
export function labelsMatch(filters: Filters, labels: Record<string, string> | null | undefined): boolean {
  for (const f of filters.get('label') ?? []) {
    const eq = f.indexOf('=');
    const key = eq < 0 ? f : f.slice(0, eq);
    if (!labels || !(key in labels)) return false;
    if (eq >= 0 && labels[key] !== f.slice(eq + 1)) return false;
  }
  return true;
}

/** A filter that is absent matches; otherwise any one of its values must satisfy `test`. */
export function anyOf(filters: Filters, key: string, test: (value: string) => boolean): boolean {
  const values = filters.get(key);
  return !values || values.length === 0 || values.some(test);
}
