/**
 * The shape of the cloud data model: resources with typed fields, forward links (a column
 * holding another record's id) and reverse links (the records of another resource whose
 * link points here). The OData planner only ever names tables and columns found here, so
 * identifiers in SQL never come from a request.
 */

export type FieldType = 'integer' | 'bigint' | 'real' | 'text' | 'boolean' | 'datetime' | 'json';

export interface FieldDef {
  name: string;
  /** Column in the table; differs from name for an alias (two names, one column). */
  column: string;
  type: FieldType;
  /** Must be given on POST (and has no default). */
  required?: boolean;
  /** Clients may not write it (ids, timestamps, computed). */
  readOnly?: boolean;
  /** Never returned, filtered or written through OData (key hashes). */
  hidden?: boolean;
  /** The column is NOT NULL (test/cloud-model-schema.test.ts holds this to the schema): ordering needs no NULLS clause. */
  notNull?: boolean;
}

export interface LinkDef {
  name: string;
  column: string;
  target: string;
  required?: boolean;
  readOnly?: boolean;
}

export interface ReverseLinkDef {
  name: string;
  /** The resource whose rows point here. */
  source: string;
  /** The column in the source table holding this record's id. */
  via: string;
}

export interface ResourceDef {
  name: string;
  table: string;
  fields: FieldDef[];
  links: LinkDef[];
  reverse: ReverseLinkDef[];
  /** Column sets that are unique; each can address one record as a key `(a=..,b=..)`. */
  uniques: string[][];
  /** Nobody but the admin may create, change or delete these records. */
  readOnlyResource?: boolean;
}

export interface Model {
  resources: Map<string, ResourceDef>;
  /** Extra names that address the same table with a different permission (my_application). */
  get(name: string): ResourceDef | undefined;
}
