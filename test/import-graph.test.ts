/**
 * The shape of the code, read from its import statements: rooms import only downwards
 * (cli, bench -> hil -> qemu -> sim -> src), so what runs on a device or a cloud host never
 * pulls in the harness; and no modules import each other in a cycle (type-only imports
 * count: a cycle of types is still two modules that cannot be read apart).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const ROOMS = ['cli', 'bench', 'hil', 'qemu', 'sim', 'src'] as const;
type Room = (typeof ROOMS)[number];
/** How high a room stands; a module may import its own room and the ones below. */
const FLOOR: Record<Room, number> = { cli: 4, bench: 4, hil: 3, qemu: 2, sim: 1, src: 0 };

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = join(dir, e.name);
    // A peer the bench installs (bench/peers/pinejs) brings its own packages: not ours.
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : sources(rel);
    return /\.m?ts$/.test(e.name) && !e.name.endsWith('.d.ts') ? [rel] : [];
  });
}

const SPEC = `['"]((?:\\.{1,2}/|fleetlab/)[^'"]+)['"]`;
const IMPORT = new RegExp(`(?:^|[\\s;])(?:import|export)\\s[^'";]*?from\\s*${SPEC}|import\\(\\s*${SPEC}\\s*\\)|(?:^|[\\s;])import\\s+${SPEC}`, 'g');
/** The package's own names (tsconfig.json `paths`), as the modules they serve from the sources. */
const SELF: Record<string, string> = { 'fleetlab/test': 'hil/harness/index.ts' };

/** Relative and self-named imports of a file, as repository paths of the .ts modules they name. */
function importsOf(file: string, text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(IMPORT)) {
    const spec = (m[1] ?? m[2] ?? m[3])!;
    out.push(SELF[spec] ?? relative(ROOT, resolve(ROOT, dirname(file), spec)).replace(/\.js$/, '.ts').replace(/\.mjs$/, '.mts'));
  }
  return out;
}

/** The module specifiers a file's import statements name, as written. */
const specifiersOf = (text: string) => [...text.matchAll(IMPORT)].map((m) => (m[1] ?? m[2] ?? m[3])!);

function graph(): Map<string, string[]> {
  const files = ROOMS.flatMap((room) => sources(room));
  const known = new Set(files);
  return new Map(files.map((f) => [f, importsOf(f, readFileSync(join(ROOT, f), 'utf8')).filter((t) => known.has(t))]));
}

/** Strongly connected components of more than one module (or one importing itself): the cycles. */
function cycles(g: Map<string, string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (g.get(v) ?? []).includes(v)) found.push(scc.sort());
    }
  };
  for (const v of g.keys()) if (!idx.has(v)) visit(v);
  return found;
}

const roomOf = (file: string) => file.split('/')[0] as Room;

describe('the import graph', () => {
  const g = graph();

  it('reads the statements it must', () => {
    expect(importsOf('cli/main.ts', `import { a } from './x.js';\nconst m = await import('../sim/device.js');\nexport type { T } from "../src/t.js";\nimport './side.js';`)).toEqual([
      'cli/x.ts', 'sim/device.ts', 'src/t.ts', 'cli/side.ts',
    ]);
    expect(importsOf('hil/specs/x.spec.ts', `import { test } from 'fleetlab/test';`)).toEqual(['hil/harness/index.ts']);
    expect(g.get('cli/main.ts')).toContain('src/cli/action.ts');
    expect(g.size).toBeGreaterThan(150);
  });

  it('points down only: cli, bench -> hil -> qemu -> sim -> src', () => {
    const upward = [...g].flatMap(([from, tos]) => tos.filter((to) => FLOOR[roomOf(to)] > FLOOR[roomOf(from)]).map((to) => `${from} -> ${to}`));
    expect(upward).toEqual([]);
  });

  it("our own specs use fleetlab/test's public names, by that name, and their own release helpers", () => {
    const specs = [...g.keys()].filter((f) => f.startsWith('hil/specs/'));
    const reaching = specs.flatMap((from) => g.get(from)!.filter((to) => to !== 'hil/harness/index.ts' && to !== 'hil/lib/apps.ts').map((to) => `${from} -> ${to}`));
    expect(reaching).toEqual([]);
    const byPath = specs.flatMap((from) => specifiersOf(readFileSync(join(ROOT, from), 'utf8')).filter((s) => s.includes('harness')).map((s) => `${from}: ${s}`));
    expect(byPath).toEqual([]);
    expect(specs.filter((from) => g.get(from)!.includes('hil/harness/index.ts')).length).toBe(specs.length);
  });

  it('has no cycles', () => {
    expect(cycles(g)).toEqual([]);
  });

  it('finds a cycle when there is one', () => {
    expect(cycles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]]))).toEqual([['a', 'b', 'c']]);
  });
});
