/**
 * What reading a compose file found wrong, gathered rather than thrown one at a time: every
 * key fleetlab refuses and every bad value, each with its line, said in one FleetlabError
 * (HIL_ERR_COMPOSE) so a team fixes them all in one go. Keys the team chose to ignore
 * (`ignoreComposeKeys` in fleetlab.config) are left out and kept apart, to be warned about.
 */
import { isAlias, isMap, isScalar, isSeq, type Document, type LineCounter, type Node, type Pair } from 'yaml';
import { FleetlabError } from '../../src/errors.js';

/** A problem at a key (dotted path, `[n]` for list items), thrown by the parsers and caught by a report. */
export class ComposeProblem extends Error {
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(message);
  }
}

export const problem = (key: string, message: string) => new ComposeProblem(key, message);

/** Why a key is refused: compose has it but the device has no place for it, or compose has no such key. */
export type Refusal = 'not-carried' | 'unknown';

export interface Found {
  key: string;
  message: string;
  line?: number;
}

export interface IgnoredKey {
  key: string;
  line?: number;
  /** The `ignoreComposeKeys` entry that matched it. */
  entry: string;
}

/**
 * Whether an `ignoreComposeKeys` entry names a key: a dotted path whose `*` stands for one
 * name (`services.*.logging`, `services.web.build.ssh`), or a bare key name, which stands for
 * the top-level key and every service's key of that name (`logging`, `secrets`). A service's
 * name may hold dots, so `services` names the service by `serviceNames` where it can.
 */
export function ignoreMatches(entry: string, key: string, serviceNames: readonly string[] = []): boolean {
  const split = (path: string): string[] => {
    const service = [...serviceNames].sort((x, y) => y.length - x.length).find((n) => path === `services.${n}` || path.startsWith(`services.${n}.`));
    return service === undefined ? path.split('.') : ['services', service, ...path.slice(`services.${service}.`.length).split('.').filter(Boolean)];
  };
  const patterns = entry.includes('.') ? [entry] : [entry, `services.*.${entry}`];
  const got = split(key);
  return patterns.some((p) => {
    const want = p.startsWith('services.*.') ? ['services', '*', ...p.slice('services.*.'.length).split('.')] : split(p);
    return want.length === got.length && want.every((w, i) => w === '*' || w === got[i]);
  });
}

/** The line (1-based) a key is written on, following merges (`<<: *anchor`) to where the key stands. */
export function lineOfKey(doc: Document, counter: LineCounter, key: string): number | undefined {
  let node: unknown = doc.contents;
  let rest = key;
  let line: number | undefined;
  const lineAt = (n: unknown) => {
    const range = (n as Node | null)?.range;
    return range ? counter.linePos(range[0]).line : undefined;
  };
  // yaml gives a merge key the value Symbol(<<) and the source `<<`.
  const isMerge = (p: Pair) => isScalar(p.key) && (p.key.source === '<<' || p.key.value === '<<');
  const pairsOf = (map: unknown, depth = 0): Pair[] => {
    if (!isMap(map) || depth > 10) return [];
    const own = map.items.filter((p) => !isMerge(p));
    const merged = map.items
      .filter(isMerge)
      .flatMap((p) => (isSeq(p.value) ? p.value.items : [p.value]))
      .flatMap((source) => pairsOf(isAlias(source) ? source.resolve(doc) : source, depth + 1));
    return [...own, ...merged];
  };
  while (rest && node) {
    if (isAlias(node)) node = node.resolve(doc);
    if (isSeq(node)) {
      const m = /^\[(\d+)\]\.?/.exec(rest);
      if (!m) break;
      node = node.items[Number(m[1])];
      line = lineAt(node) ?? line;
      rest = rest.slice(m[0].length);
      continue;
    }
    let best: Pair | undefined;
    let bestKey = '';
    for (const pair of pairsOf(node)) {
      const name = String(isScalar(pair.key) ? pair.key.value : pair.key);
      const fits = rest === name || rest.startsWith(`${name}.`) || rest.startsWith(`${name}[`);
      // Names may hold dots (labels, sysctls): the longest that fits is the key.
      if (fits && name.length > bestKey.length) {
        best = pair;
        bestKey = name;
      }
    }
    if (!best) break;
    line = lineAt(best.key) ?? line;
    rest = rest.slice(bestKey.length).replace(/^\./, '');
    node = best.value;
  }
  return line;
}

export class ComposeReport {
  readonly problems: Found[] = [];
  readonly refused: Array<Found & { why: Refusal }> = [];
  readonly ignored: IgnoredKey[] = [];
  /** The file's service names, so an ignore entry can tell a dotted service name from a nested key. */
  serviceNames: readonly string[] = [];

  constructor(
    private readonly file: string,
    private readonly ignore: readonly string[],
    private readonly lineOf: (key: string) => number | undefined,
  ) {}

  /** Runs one key's check; a ComposeProblem it throws is noted and the reading goes on (undefined). */
  attempt<T>(check: () => T): T | undefined {
    try {
      return check();
    } catch (err) {
      if (!(err instanceof ComposeProblem)) throw err;
      this.problems.push({ key: err.key, message: err.message, line: this.lineOf(err.key) });
      return undefined;
    }
  }

  /** A key fleetlab does not carry: noted as refused, or as ignored when the team's list names it. */
  refuse(key: string, why: Refusal, message: string): void {
    const line = this.lineOf(key);
    const entry = this.ignore.find((e) => ignoreMatches(e, key, this.serviceNames));
    if (entry !== undefined) this.ignored.push({ key, entry, ...(line !== undefined ? { line } : {}) });
    else this.refused.push({ key, message, why, ...(line !== undefined ? { line } : {}) });
  }

  /** Entries of the ignore list that matched no key (a typo, or a key since removed). */
  unusedIgnores(): string[] {
    return this.ignore.filter((e) => !this.ignored.some((i) => i.entry === e));
  }

  /** One error naming everything found, refused keys first, each in file order; undefined when all is well. */
  error(carried: readonly string[]): FleetlabError | undefined {
    const byLine = (a: Found, b: Found) => (a.line ?? Infinity) - (b.line ?? Infinity);
    const all = [...[...this.refused].sort(byLine), ...[...this.problems].sort(byLine)];
    if (all.length === 0) return undefined;
    const where = (f: Found) => `${this.file}${f.line !== undefined ? `:${f.line}` : ''}: ${f.key}: ${f.message}`;
    const hint = this.refused.length
      ? `\nfleetlab carries these service keys: ${carried.join(', ')}. Remove the others, or list the ones your app can run without under ignoreComposeKeys in fleetlab.config.ts (each is then left out of the release, with a warning at every run).`
      : '';
    const text = all.length === 1 ? `${where(all[0]!)}${hint}` : `${this.file}: ${all.length} problems:\n${all.map((f) => `  ${where(f)}`).join('\n')}${hint}`;
    return new FleetlabError('HIL_ERR_COMPOSE', text);
  }
}

/** The warning printed for each ignored key, at every run. */
export const ignoredWarning = (file: string, i: IgnoredKey): string =>
  `${file}${i.line !== undefined ? `:${i.line}` : ''}: ${i.key} is ignored (ignoreComposeKeys: "${i.entry}"): the device runs the service without it`;
