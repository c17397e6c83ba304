/**
 * Every document the tree cites is in the tree. Code comments, tests and READMEs point
 * readers at `docs/<name>.md` (the decisions, the device and cloud API contracts, the error
 * catalogue, ...); each such file must exist in `docs/`. And no file may still send a reader
 * to the documents that live outside the repository and the npm package (the shared
 * decisions list and the upstream API specifications): their in-repo stand-ins are
 * `docs/decisions.md`, `docs/device-api.md` and `docs/cloud-api.md`.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
/** Not ours to check: installed packages, build output, test and report output. */
const SKIP_DIRS = new Set(['node_modules', 'dist', '.git', 'test-results', 'hil-results', 'playwright-report', 'fleetlab-report']);
const SCANNED = /\.(ts|mts|md)$/;

/** A citation of a document in the repository's docs/ folder (also written `../docs/...`). */
const CITED_DOC = /(?<![\w-])docs\/([A-Za-z0-9._-]+\.md)\b/g;

/**
 * Citations of the documents outside the repository, in the forms the tree used: the shared
 * decisions file by name, "<that word> item N", "<that word> N", "<that word>: topic", and
 * the two upstream specification files. Built from parts so this file does not match itself.
 */
const WORD = ['DECI', 'SIONS'].join('');
const STALE: readonly { pattern: RegExp; instead: string }[] = [
  { pattern: new RegExp(`\\b${WORD}\\.md\\b`), instead: 'docs/decisions.md' },
  { pattern: new RegExp(`\\b${WORD}(?:\\s*:|\\s+(?:items?\\s+)?\\d)`), instead: 'docs/decisions.md item N' },
  { pattern: new RegExp(`\\bspec/${'supervisor'}-api\\.md\\b`), instead: 'docs/device-api.md' },
  { pattern: new RegExp(`\\bspec/${'cloud'}-api\\.md\\b`), instead: 'docs/cloud-api.md' },
];

function scannedFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.isDirectory()) return SKIP_DIRS.has(e.name) ? [] : scannedFiles(join(dir, e.name));
    return e.isFile() && SCANNED.test(e.name) ? [join(dir, e.name)] : [];
  });
}

/** What is wrong with one file's citations, one line each; `exists` says whether docs/<name> is there. */
function citationProblems(file: string, text: string, exists: (docName: string) => boolean): string[] {
  const problems: string[] = [];
  text.split('\n').forEach((line, i) => {
    const at = `${file}:${i + 1}`;
    for (const m of line.matchAll(CITED_DOC)) {
      if (!exists(m[1]!)) problems.push(`${at} cites docs/${m[1]}, which does not exist`);
    }
    for (const { pattern, instead } of STALE) {
      const m = pattern.exec(line);
      if (m) problems.push(`${at} cites "${m[0]}", which is not in the repository; cite ${instead}`);
    }
  });
  return problems;
}

const docExists = (name: string) => existsSync(join(ROOT, 'docs', name));

describe('documents cited in the tree', () => {
  it('are all in docs/, and none is outside the repository', () => {
    const files = scannedFiles(ROOT);
    expect(files.length).toBeGreaterThan(100);
    const problems = files.flatMap((f) => citationProblems(relative(ROOT, f), readFileSync(f, 'utf8'), docExists));
    expect(problems).toEqual([]);
  });

  it('the three in-repo stand-ins exist and are cited', () => {
    const all = scannedFiles(ROOT).map((f) => readFileSync(f, 'utf8')).join('\n');
    for (const name of ['decisions.md', 'device-api.md', 'cloud-api.md']) {
      expect(docExists(name), name).toBe(true);
      expect(all, name).toContain(`docs/${name}`);
    }
  });

  describe('the check itself catches', () => {
    it('a cited document that does not exist', () => {
      const missing = ['no', 'where.md'].join('');
      expect(citationProblems('a.ts', `// see docs/${missing} "Section"`, docExists)).toEqual([
        `a.ts:1 cites docs/${missing}, which does not exist`,
      ]);
      expect(citationProblems('a.md', 'see `../docs/errors.md`', docExists)).toEqual([]);
    });

    it('a citation of the documents outside the repository', () => {
      const stale = [`(${WORD}.md item 15)`, `(${WORD} 17)`, `(${WORD} 16-17)`, `(${WORD}: redsocks.service)`, `spec/${'supervisor'}-api.md`, `../shared/spec/${'cloud'}-api.md`];
      for (const line of stale) expect(citationProblems('b.ts', line, docExists), line).toHaveLength(1);
      expect(citationProblems('b.ts', 'docs/decisions.md item 15; Decisions on what is open', docExists)).toEqual([]);
    });
  });
});
