/**
 * Filter expressions in two stages. `Expr` names fields by path, as the URL (or a
 * permission rule) wrote them; `RExpr` is the same tree after every path was checked
 * against the model, so it names only known links, tables and columns.
 */
import type { SqlValue } from '../db/port.js';
import type { FieldType, LinkDef, ResourceDef } from '../model/types.js';

export type CmpOp = 'eq' | 'ne' | 'gt' | 'ge' | 'lt' | 'le';
export type ArithOp = 'add' | 'sub' | 'mul' | 'div' | 'mod';

/** `scope` is a lambda variable, or null for the resource being queried. */
export type Expr =
  | { k: 'lit'; v: SqlValue }
  | { k: 'field'; scope: string | null; path: string[] }
  | { k: 'cmp'; op: CmpOp; l: Expr; r: Expr }
  | { k: 'arith'; op: ArithOp; l: Expr; r: Expr }
  | { k: 'and' | 'or'; l: Expr; r: Expr }
  | { k: 'not'; e: Expr }
  | { k: 'in'; l: Expr; list: Expr[] }
  | { k: 'call'; fn: string; args: Expr[] }
  | { k: 'lambda'; scope: string | null; path: string[]; fn: 'any' | 'all'; v: string; body: Expr }
  | { k: 'count'; scope: string | null; path: string[]; filter?: Expr };

/**
 * The caller's read permission on the record a link leads to: `where` names that record
 * by the variable `v`. A walk through a link the caller may not read finds nothing (null).
 */
export interface Guard {
  v: string;
  resource: ResourceDef;
  where: RExpr;
}

/** A column reached from a scope through zero or more to-one links. */
export interface ColumnRef {
  k: 'col';
  scope: string;
  links: LinkDef[];
  /** One per link; null where the link needs no check (unrestricted target, or a permission rule itself). */
  guards?: (Guard | null)[];
  column: string;
  type: FieldType;
  /** A NOT NULL column of the scope's own record (no link that could make it null). */
  notNull?: boolean;
}

/** The rows of `source` whose `via` column points at the record reached by scope+links. */
export interface ManyRef {
  scope: string;
  links: LinkDef[];
  guards?: (Guard | null)[];
  source: ResourceDef;
  via: string;
  /** The source resource's permission, already resolved; null when unrestricted. */
  permission: RExpr | null;
  /** The variable the permission names the source rows by. */
  permVar: string;
}

export type RExpr =
  | { k: 'lit'; v: SqlValue }
  | ColumnRef
  | { k: 'cmp'; op: CmpOp; l: RExpr; r: RExpr }
  | { k: 'arith'; op: ArithOp; l: RExpr; r: RExpr }
  | { k: 'and' | 'or'; l: RExpr; r: RExpr }
  | { k: 'not'; e: RExpr }
  | { k: 'in'; l: RExpr; list: RExpr[] }
  | { k: 'call'; fn: string; args: RExpr[] }
  | { k: 'lambda'; fn: 'any' | 'all'; many: ManyRef; v: string; body: RExpr }
  | { k: 'count'; many: ManyRef; v: string; filter: RExpr | null }
  | { k: 'false' };

export const and = <E extends Expr | RExpr>(a: E | null, b: E | null): E | null =>
  a && b ? ({ k: 'and', l: a, r: b } as E) : (a ?? b);

export const eqField = (path: string[], v: SqlValue, scope: string | null = null): Expr => ({
  k: 'cmp',
  op: 'eq',
  l: { k: 'field', scope, path },
  r: { k: 'lit', v },
});
