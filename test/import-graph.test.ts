/**
 * The shape of the code, read from its import statements. Every top-level folder of code is
 * a room on a floor (README "Layout"); a module imports its own room or a room on a lower
 * floor, never a room beside it, so what runs on a device or a cloud host never pulls in the
 * harness, and the rooms form no loop. No modules import each other in a cycle either (type-only
 * imports count: a cycle of types is still two modules that cannot be read apart).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
/** How high a room stands; a module may import its own room and the ones on lower floors. */
const FLOOR: Record<string, number> = { cli: 6, bench: 6, board: 5, hil: 4, qemu: 3, 'device-image': 2, 'device-access': 2, sim: 1, support: 1, src: 0 };
/** Folders that hold code but are no room: tests and the examples and fixtures they run, as users. */
const NOT_ROOMS = new Set(['node_modules', 'dist', 'test', 'fixtures', 'examples', 'scripts', 'bin', 'test-results', 'hil-results', 'playwright-report', 'docs']);
/** The folders that hold TypeScript, found, not listed: a new one must be given a floor. */
const ROOMS = readdirSync(ROOT, { withFileTypes: true })
  .filter((e) => e.isDirectory() && !e.name.startsWith('.') && !NOT_ROOMS.has(e.name) && sources(e.name).length > 0)
  .map((e) => e.name)
  .sort();

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

const roomOf = (file: string) => file.split('/')[0]!;

/** The rooms' own graph (or the folders', by `placeOf`): a room imports another when one of its modules does. */
function roomGraph(g: Map<string, string[]>, placeOf: (file: string) => string = roomOf): Map<string, string[]> {
  const rooms = new Map<string, Set<string>>();
  for (const [from, tos] of g) for (const to of tos) if (placeOf(to) !== placeOf(from)) (rooms.get(placeOf(from)) ?? rooms.set(placeOf(from), new Set()).get(placeOf(from))!).add(placeOf(to));
  return new Map([...rooms].map(([r, tos]) => [r, [...tos].sort()]));
}

describe('the import graph', () => {
  const g = graph();

  it('reads the statements it must', () => {
    expect(importsOf('cli/main.ts', `import { a } from './x.js';\nconst m = await import('../sim/device.js');\nexport type { T } from "../src/t.js";\nimport './side.js';`)).toEqual([
      'cli/x.ts', 'sim/device.ts', 'src/t.ts', 'cli/side.ts',
    ]);
    expect(importsOf('hil/specs/x.spec.ts', `import { test } from 'fleetlab/test';`)).toEqual(['hil/harness/index.ts']);
    expect(g.get('cli/sim.ts')).toContain('src/command/action.ts');
    expect(g.size).toBeGreaterThan(150);
  });

  it('knows the floor of every room', () => {
    expect(ROOMS.filter((room) => FLOOR[room] === undefined)).toEqual([]);
    expect(ROOMS).toEqual(expect.arrayContaining(['board', 'cli', 'hil', 'src']));
  });

  it("is drawn in the README's layout, every room on its floor", () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const layout = readme.slice(readme.indexOf('## Layout'), readme.indexOf('\n## ', readme.indexOf('## Layout') + 1));
    const drawn = new Map([...layout.matchAll(/^ floor (\d+) +(.+)$/gm)].flatMap((m) => m[2]!.trim().split(/\s+/).map((room) => [room.replace(/\/$/, ''), Number(m[1])] as const)));
    expect(Object.fromEntries(drawn)).toEqual(Object.fromEntries(ROOMS.map((room) => [room, FLOOR[room]])));
  });

  it('points down only: to its own room or a lower floor, never beside it', () => {
    const wrong = [...g].flatMap(([from, tos]) =>
      tos.filter((to) => roomOf(to) !== roomOf(from) && FLOOR[roomOf(to)]! >= FLOOR[roomOf(from)]!).map((to) => `${from} -> ${to}`),
    );
    expect(wrong).toEqual([]);
  });

  it('has rooms that form no loop', () => {
    expect(cycles(roomGraph(g))).toEqual([]);
  });

  it('has folders inside a room that form no loop either', () => {
    // A module directly in the room (hil/fixtures.ts) counts as its own folder.
    const folderOf = (file: string) => file.split('/').slice(0, 2).join('/');
    const loops = ROOMS.flatMap((room) => {
      const inRoom = new Map([...g].filter(([from]) => roomOf(from) === room).map(([from, tos]) => [from, tos.filter((to) => roomOf(to) === room)]));
      return cycles(roomGraph(inRoom, folderOf));
    });
    expect(loops).toEqual([]);
  });

  it('keeps tests apart: no room imports test/', () => {
    const reaching = ROOMS.flatMap((room) => sources(room)).flatMap((f) => importsOf(f, readFileSync(join(ROOT, f), 'utf8')).filter((to) => to.startsWith('test/')).map((to) => `${f} -> ${to}`));
    expect(reaching).toEqual([]);
  });

  it("our own specs use fleetlab/test's public names, by that name, and their own helpers (releases, the proxy they set)", () => {
    const specs = [...g.keys()].filter((f) => f.startsWith('hil/specs/'));
    const allowed = new Set(['hil/harness/index.ts', 'hil/lib/apps.ts', 'hil/lib/host-config.ts']);
    const reaching = specs.flatMap((from) => g.get(from)!.filter((to) => !allowed.has(to)).map((to) => `${from} -> ${to}`));
    expect(reaching).toEqual([]);
    const byPath = specs.flatMap((from) => specifiersOf(readFileSync(join(ROOT, from), 'utf8')).filter((s) => s.includes('harness')).map((s) => `${from}: ${s}`));
    expect(byPath).toEqual([]);
    expect(specs.filter((from) => g.get(from)!.includes('hil/harness/index.ts')).length).toBe(specs.length);
  });

  it('has no cycles', () => {
    expect(cycles(g)).toEqual([]);
  });

  it('finds a cycle when there is one, between modules and between rooms', () => {
    expect(cycles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]]))).toEqual([['a', 'b', 'c']]);
    const g = new Map([['hil/a.ts', ['qemu/b.ts']], ['qemu/b.ts', ['src/c.ts']], ['src/c.ts', ['hil/d.ts']], ['hil/d.ts', []]]);
    expect(cycles(g)).toEqual([]);
    expect(cycles(roomGraph(g))).toEqual([['hil', 'qemu', 'src']]);
  });
});
