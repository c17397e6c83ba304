/**
 * OData URL -> a plain request description, using the reference's own grammar
 * (@balena/odata-parser). Two things are settled here rather than in the grammar:
 * - `$orderby=f` without a direction: the grammar defaults to `desc`; docs/decisions.md item 18
 *   says ascending, so every undirected sort item gets an explicit `asc` before parsing;
 * - bind references become literal values, so later stages see one self-contained tree.
 */
import { createRequire } from 'node:module';
import type * as ParserTypes from '@balena/odata-parser';
import { FleetlabError } from '../../errors.js';
import type { SqlValue } from '../db/port.js';
import type { ArithOp, CmpOp, Expr } from './expr.js';

const require = createRequire(import.meta.url);
const parser = require('@balena/odata-parser') as typeof ParserTypes;

export interface OrderItem {
  path: string[];
  desc: boolean;
  /** `link/$count` or `link/$count($filter=...)`: order by the number of linked records. */
  count?: { filter?: Expr };
}

export interface ExpandItem {
  name: string;
  count: boolean;
  options: QueryOptions;
}

export interface QueryOptions {
  select?: string[];
  filter?: Expr;
  orderby?: OrderItem[];
  top?: number;
  skip?: number;
  expand?: ExpandItem[];
}

export interface ParsedRequest {
  resource: string;
  /** A single value `(1)` or named values `(uuid='x')`, `(device=1,tag_key='k')`. */
  key?: SqlValue | Record<string, SqlValue>;
  count: boolean;
  options: QueryOptions;
}

export const badRequest = (message: string) => new FleetlabError('CLOUD_ERR_BAD_REQUEST', message);

type Parsed = { tree: ParserTypes.ODataQuery; binds: ParserTypes.ODataBinds };

function grammar(text: string): Parsed {
  try {
    return parser.parse(text);
  } catch (err) {
    throw badRequest(`Malformed OData URL: ${(err as Error).message}`);
  }
}

/** `url` is the path after the version prefix plus the raw query string: `/device(1)?$select=id`. */
export function parseODataUrl(url: string): ParsedRequest {
  return fromGrammar(grammar(prepared(url)));
}

const prepared = (url: string) => withExplicitSortOrder(decodeSafeEscapes(url));

function fromGrammar({ tree, binds }: Parsed): ParsedRequest {
  if (typeof tree.resource !== 'string') throw badRequest('Missing resource');
  if (tree.link !== undefined || tree.property !== undefined) throw badRequest('Navigation paths after a key are not supported; use $expand');
  const conv = new Converter(binds);
  return {
    resource: tree.resource,
    key: tree.key === undefined ? undefined : conv.key(tree.key),
    count: tree.count === true,
    options: conv.options(tree.options ?? {}),
  };
}

/** Most URL shapes an OData parser keeps. */
export const SHAPES_KEPT = 1000;

/**
 * Parses OData URLs as parseODataUrl does, keeping the grammar's tree of each URL's
 * *shape*: the URL with its literals taken out as parameter aliases
 * (`device(uuid='ab')` is `device(uuid=@l0)` with `@l0` = 'ab'). A client asks the same
 * shapes over and over with other values (a device by uuid, a fleet's devices by id), and
 * the grammar is most of what a request costs the cloud's process (0.1 to 0.35 ms of a
 * request's ~0.5 ms), so a request of a known shape only converts the kept tree with its
 * own values. A shape the grammar refuses with aliases (a literal where an alias may not
 * stand) is remembered as such, and its URLs are parsed whole. One per cloud; at most
 * `max` shapes, the least recently used going first.
 */
export class ODataUrlParser {
  private readonly shapes = new Map<string, Parsed | null>();
  constructor(private readonly max = SHAPES_KEPT) {}

  parse(url: string): ParsedRequest {
    const text = prepared(url);
    const lifted = liftLiterals(text);
    if (!lifted) return fromGrammar(grammar(text));
    let shape = this.shapes.get(lifted.shape);
    if (shape === undefined) {
      try {
        shape = parser.parse(lifted.shape);
      } catch {
        shape = null;
      }
      if (this.shapes.size >= this.max) this.shapes.delete(this.shapes.keys().next().value!);
    } else {
      this.shapes.delete(lifted.shape);
    }
    this.shapes.set(lifted.shape, shape);
    if (shape === null) return fromGrammar(grammar(text));
    return fromGrammar({ tree: shape.tree, binds: Object.assign(shape.binds.slice(), lifted.binds) as ParserTypes.ODataBinds });
  }
}

/**
 * `text` with its text, number and date literals replaced by aliases `@l0`, `@l1`, ...,
 * and what each alias stands for, as the grammar would have bound it (QuotedTextBind,
 * NumberBind, DateBind); null for a URL with aliases of its own. What stays as it is: a
 * quote after any other letter (a typed literal the grammar reads itself), a number
 * anywhere but after `(`, `,`, `=` or a space and before `)`, `,`, `&`, `;`, a space or
 * the end, and the counts of `$top=` and `$skip=`, where the grammar takes no alias.
 */
export function liftLiterals(text: string): { shape: string; binds: Record<string, [string, SqlValue]> } | null {
  if (text.includes('@')) return null;
  const binds: Record<string, [string, SqlValue]> = {};
  let out = '';
  let n = 0;
  let i = 0;
  const alias = (bind: [string, SqlValue]) => {
    const name = `@l${n++}`;
    binds[name] = bind;
    return name;
  };
  const quoteAt = (j: number) => (text[j] === "'" ? 1 : text.slice(j, j + 3).toLowerCase() === '%27' ? 3 : 0);
  const spaceBefore = (j: number) => text[j - 1] === ' ' || text[j - 1] === '+' || text.slice(j - 3, j) === '%20';
  while (i < text.length) {
    const q = quoteAt(i);
    if (q) {
      // The literal's end: a quote not followed by another (a doubled quote is one quote).
      let j = i + q;
      let raw = '';
      for (;;) {
        if (j >= text.length) return null;
        const c = quoteAt(j);
        if (!c) {
          raw += text[j++];
          continue;
        }
        const d = quoteAt(j + c);
        if (!d) break;
        raw += "'";
        j += c + d;
      }
      let value: string;
      try {
        value = decodeURIComponent(raw);
      } catch {
        return null;
      }
      const end = j + quoteAt(j);
      const date = /(?<![A-Za-z_])(datetime|date)$/.exec(out);
      const time = date ? Date.parse(value) : NaN;
      if (date && !Number.isNaN(time)) out = out.slice(0, -date[0].length) + alias([date[1] === 'date' ? 'Date' : 'Date Time', time]);
      else if (/[A-Za-z]/.test(text[i - 1] ?? '')) out += text.slice(i, end);
      else out += alias(['Text', value]);
      i = end;
      continue;
    }
    const num = /^-?[0-9]+(\.[0-9]+)?(?=$|[),&; +]|%20)/.exec(text.slice(i, i + 40));
    const before = text[i - 1] ?? '';
    if (num && ('(,='.includes(before) || spaceBefore(i)) && !/\$(top|skip)=$/i.test(text.slice(Math.max(0, i - 6), i))) {
      out += alias(['Real', Number(num[0])]);
      i += num[0].length;
      continue;
    }
    // A name with digits in it (`a0`, `semver_major`) stays whole, and so does an escape (`%20`).
    const word = /^(%[0-9A-Fa-f]{2}|[A-Za-z_0-9]+)/.exec(text.slice(i, i + 200));
    const step = word ? word[0].length : 1;
    out += text.slice(i, i + step);
    i += step;
  }
  return { shape: out, binds };
}

class Converter {
  constructor(private readonly binds: ParserTypes.ODataBinds) {}

  private bindValue(b: [string, unknown]): SqlValue | SqlValue[] {
    const [type, value] = b;
    switch (type) {
      case 'Real':
      case 'Integer':
        if (typeof value !== 'number' || !Number.isFinite(value)) throw badRequest('Bad number');
        return value;
      case 'Text':
        // PostgreSQL cannot store NUL in text; refuse it on both databases alike.
        if (String(value).includes('\u0000')) throw badRequest('Text may not contain NUL characters');
        return String(value);
      case 'Boolean':
        return Boolean(value);
      case 'Date':
      case 'Date Time': {
        const d = new Date(value as number | string);
        if (Number.isNaN(d.getTime())) throw badRequest('Bad date');
        return d.toISOString();
      }
      case 'List':
        return (value as [string, unknown][]).map((v) => {
          const one = this.bindValue(v);
          if (Array.isArray(one)) throw badRequest('Nested lists are not supported');
          return one;
        });
      default:
        throw badRequest(`Literals of type ${type} are not supported`);
    }
  }

  value(ref: unknown): SqlValue | SqlValue[] {
    const key = (ref as { bind?: ParserTypes.BindKey }).bind;
    const bind = typeof key === 'number' ? this.binds[key] : key !== undefined ? this.binds[key] : undefined;
    if (!bind) throw badRequest('Unknown parameter reference');
    return this.bindValue(bind);
  }

  scalar(ref: unknown): SqlValue {
    const v = this.value(ref);
    if (Array.isArray(v)) throw badRequest('A list is not allowed here');
    return v;
  }

  key(key: NonNullable<ParserTypes.ODataQuery['key']>): SqlValue | Record<string, SqlValue> {
    if ('bind' in key && typeof (key as { bind: unknown }).bind !== 'object') return this.scalar(key);
    const out: Record<string, SqlValue> = {};
    for (const [name, ref] of Object.entries(key as Record<string, ParserTypes.BindReference>)) out[name] = this.scalar(ref);
    return out;
  }

  options(o: ParserTypes.ODataOptions): QueryOptions {
    const out: QueryOptions = {};
    for (const name of Object.keys(o)) {
      if (!['$select', '$filter', '$expand', '$orderby', '$top', '$skip', '$count', '$format'].includes(name)) {
        if (name.startsWith('$')) throw badRequest(`Unsupported query option ${name}`);
      }
    }
    if (o.$count !== undefined) throw badRequest('$count=true is not supported; use /$count or link/$count in $expand');
    if (o.$select !== undefined && o.$select !== '*') {
      out.select = o.$select.properties.map((p) => {
        if (p.property) throw badRequest('$select takes field names, not paths');
        return p.name;
      });
    }
    if (o.$filter !== undefined) out.filter = this.expr(o.$filter);
    if (o.$orderby !== undefined) out.orderby = o.$orderby.properties.map((p) => this.orderItem(p));
    if (o.$top !== undefined) out.top = this.count(o.$top, '$top');
    if (o.$skip !== undefined) out.skip = this.count(o.$skip, '$skip');
    if (o.$expand !== undefined) {
      out.expand = o.$expand.properties.map((p) => {
        if (p.property) throw badRequest('Expand one link per item; nest with $expand=a($expand=b)');
        return { name: p.name, count: p.count === true, options: this.options(p.options ?? {}) };
      });
    }
    return out;
  }

  private count(v: unknown, what: string): number {
    const n = typeof v === 'number' ? v : this.scalar(v);
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) throw badRequest(`${what} must be a non-negative integer`);
    return n;
  }

  /** A field path, or a `link/$count` (with an optional `$filter`) as pinejs-client writes it. */
  private orderItem(p: { name: string; order?: string }): OrderItem {
    const e = this.member(p as PathNode, new Set());
    const desc = p.order === 'desc';
    if (e.k === 'field') return { path: e.path, desc };
    if (e.k === 'count') return { path: e.path, desc, count: e.filter ? { filter: e.filter } : {} };
    throw badRequest('Unexpected lambda in $orderby');
  }

  expr(node: unknown, lambdaVars: Set<string> = new Set()): Expr {
    if (node === null) return { k: 'lit', v: null };
    if (Array.isArray(node)) return this.operation(node, lambdaVars);
    if (typeof node === 'object' && node !== null) {
      if ('bind' in node) {
        const v = this.value(node);
        if (Array.isArray(v)) throw badRequest('A list is only allowed after `in`');
        return { k: 'lit', v };
      }
      if ('name' in node) return this.member(node as PathNode, lambdaVars);
    }
    if (typeof node === 'number' || typeof node === 'string' || typeof node === 'boolean') return { k: 'lit', v: node };
    throw badRequest('Unsupported expression');
  }

  private member(node: PathNode, lambdaVars: Set<string>): Expr {
    const names: string[] = [];
    let cur: PathNode | undefined = node;
    const scope = lambdaVars.has(node.name) ? node.name : null;
    if (scope) cur = node.property;
    while (cur) {
      names.push(cur.name);
      if (cur.lambda) {
        if (cur.property) throw badRequest('Nothing may follow a lambda');
        const { method, identifier, expression } = cur.lambda;
        if (method !== 'any' && method !== 'all') throw badRequest(`Unknown lambda ${String(method)}`);
        const inner = new Set(lambdaVars).add(identifier);
        return { k: 'lambda', scope, path: names, fn: method, v: identifier, body: this.expr(expression, inner) };
      }
      if (cur.count) {
        if (cur.property) throw badRequest('Nothing may follow $count');
        const filter = cur.options?.$filter;
        return { k: 'count', scope, path: names, filter: filter === undefined ? undefined : this.expr(filter, lambdaVars) };
      }
      cur = cur.property;
    }
    if (names.length === 0) throw badRequest(`A lambda variable needs a field: ${node.name}/field`);
    return { k: 'field', scope, path: names };
  }

  private operation(node: unknown[], lambdaVars: Set<string>): Expr {
    const [op, ...args] = node as [string, ...unknown[]];
    const two = () => [this.expr(args[0], lambdaVars), this.expr(args[1], lambdaVars)] as const;
    switch (op) {
      case 'eq':
      case 'ne':
      case 'gt':
      case 'ge':
      case 'lt':
      case 'le': {
        const [l, r] = two();
        return { k: 'cmp', op: op as CmpOp, l, r };
      }
      case 'add':
      case 'sub':
      case 'mul':
      case 'div':
      case 'mod': {
        const [l, r] = two();
        return { k: 'arith', op: op as ArithOp, l, r };
      }
      case 'and':
      case 'or': {
        // The grammar folds `a and b and c` into one node with every operand.
        const parts = args.map((a) => this.expr(a, lambdaVars));
        if (parts.length < 2) throw badRequest(`${op} needs two operands`);
        return parts.slice(1).reduce<Expr>((acc, p) => ({ k: op, l: acc, r: p }), parts[0]!);
      }
      case 'not':
        return { k: 'not', e: this.expr(args[0], lambdaVars) };
      case 'eqany': {
        const list = this.value(args[1]);
        if (!Array.isArray(list)) throw badRequest('`in` needs a list');
        return { k: 'in', l: this.expr(args[0], lambdaVars), list: list.map((v) => ({ k: 'lit', v })) };
      }
      case 'call': {
        const { method, args: callArgs } = args[0] as { method: string; args: unknown[] };
        return { k: 'call', fn: method, args: callArgs.map((a) => this.expr(a, lambdaVars)) };
      }
      default:
        throw badRequest(`Unsupported operator ${String(op)}`);
    }
  }
}

interface PathNode {
  name: string;
  property?: PathNode;
  lambda?: { method: string; identifier: string; expression: unknown };
  count?: boolean;
  options?: { $filter?: unknown };
}

/**
 * Clients encode query values with encodeURIComponent or URLSearchParams, which escape
 * `/ ( ) , $ :` that the parser only takes literally (`device%2Fuuid` would be a syntax
 * error). Those characters mean the same inside a string literal, so decoding them is safe;
 * `& = + %` and quotes stay encoded, as they change how the query splits or reads.
 */
export function decodeSafeEscapes(url: string): string {
  const safe: Record<string, string> = { '2F': '/', '28': '(', '29': ')', '2C': ',', '24': '$', '3A': ':' };
  return url.replace(/%(2F|28|29|2C|24|3A)/gi, (_m, hex: string) => safe[hex.toUpperCase()]!);
}

/**
 * Adds ` asc` to every `$orderby` item that names no direction, at any nesting depth, on
 * the raw (still percent-encoded) URL so string literals stay intact.
 */
export function withExplicitSortOrder(url: string): string {
  const marker = /(\$|%24)orderby=/gi;
  let out = '';
  let last = 0;
  for (let m = marker.exec(url); m; m = marker.exec(url)) {
    const start = m.index + m[0].length;
    let depth = 0;
    let inString = false;
    let itemStart = start;
    let i = start;
    out += url.slice(last, start);
    const flush = (end: number) => {
      const item = url.slice(itemStart, end);
      out += item;
      const text = safeDecode(item).replace(/\+/g, ' ').trim();
      if (text !== '' && !/\s(asc|desc)$/i.test(text)) out += '%20asc';
    };
    for (; i < url.length; i++) {
      const c = url[i]!;
      const quote = c === "'" || url.slice(i, i + 3).toLowerCase() === '%27';
      if (quote) {
        inString = !inString;
        if (c === '%') i += 2;
        continue;
      }
      if (inString) continue;
      if (c === '(') depth++;
      else if (c === ')') {
        if (depth === 0) break;
        depth--;
      } else if (depth === 0 && (c === '&' || c === ';')) break;
      else if (depth === 0 && (c === ',' || url.slice(i, i + 3).toUpperCase() === '%2C')) {
        flush(i);
        const width = c === ',' ? 1 : 3;
        out += url.slice(i, i + width);
        i += width - 1;
        itemStart = i + 1;
      }
    }
    flush(i);
    last = i;
    marker.lastIndex = i;
  }
  return out + url.slice(last);
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
