/**
 * The values the database port and the dialects both speak of: a leaf, so the port (which
 * holds a Dialect) and the dialects (which take these) do not import each other.
 */
export type SqlValue = string | number | boolean | null;

/** A constraint violation, already told apart from other database failures. */
export interface ConstraintViolation {
  kind: 'unique' | 'foreign-key' | 'not-null';
  /** Columns of a unique or not-null constraint, when the database names them. */
  columns: string[];
}
