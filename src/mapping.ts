/** A JSON or YAML mapping as a parser hands it over: an object, neither null nor an array. */
export type Mapping = Record<string, unknown>;

export function isMapping(v: unknown): v is Mapping {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
