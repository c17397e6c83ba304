/**
 * docs/errors.md and the error catalogue in src/errors.ts stay in step: every code has one
 * row with the catalogue's status, and the doc names no code the catalogue lacks.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { errorCatalogue } from '../src/errors.js';

const docPath = fileURLToPath(new URL('../docs/errors.md', import.meta.url));

type Catalogue = Record<string, { status: number; summary: string }>;

interface Row {
  code: string;
  status: number;
  meaning: string;
  line: number;
}

/** Rows of the codes table: `| \`CODE\` | status | meaning |`. */
function tableRows(doc: string): Row[] {
  const rows: Row[] = [];
  doc.split('\n').forEach((text, i) => {
    const cells = text.trim().match(/^\|(.*)\|$/)?.[1]?.split('|').map((c) => c.trim());
    if (!cells || cells.length !== 3) return;
    const code = cells[0]!.match(/^`([A-Z][A-Z0-9_]*)`$/)?.[1];
    if (!code) return;
    rows.push({ code, status: /^\d{3}$/.test(cells[1]!) ? Number(cells[1]) : NaN, meaning: cells[2]!, line: i + 1 });
  });
  return rows;
}

/** Every way the doc and the catalogue disagree, one message each; empty when in step. */
function compareDocWithCatalogue(doc: string, catalogue: Catalogue): string[] {
  const problems: string[] = [];
  const rows = tableRows(doc);
  const statuses = new Set(Object.values(catalogue).map((e) => e.status));
  for (const code of Object.keys(catalogue)) {
    const mine = rows.filter((r) => r.code === code);
    if (mine.length === 0) problems.push(`${code} has no row in docs/errors.md`);
    if (mine.length > 1) problems.push(`${code} has ${mine.length} rows in docs/errors.md`);
  }
  for (const row of rows) {
    const entry = catalogue[row.code];
    if (!entry) {
      problems.push(`line ${row.line}: ${row.code} is not in the catalogue`);
      continue;
    }
    if (row.status !== entry.status) problems.push(`line ${row.line}: ${row.code} is documented as ${Number.isNaN(row.status) ? 'no status' : row.status}, the catalogue says ${entry.status}`);
    if (row.meaning === '') problems.push(`line ${row.line}: ${row.code} has no meaning`);
  }
  // A code mentioned anywhere (prose, examples) must exist.
  for (const [i, text] of doc.split('\n').entries()) {
    for (const m of text.matchAll(/\b[A-Z]+_ERR_[A-Z0-9_]+\b/g)) {
      if (!(m[0] in catalogue)) problems.push(`line ${i + 1}: ${m[0]} is not in the catalogue`);
    }
    // A status in the "which status when" list must be one a code maps to.
    const listed = text.match(/^- .*: `(\d{3})`/);
    if (listed && !statuses.has(Number(listed[1]))) problems.push(`line ${i + 1}: status ${listed[1]} is not a status of any catalogue code`);
  }
  return [...new Set(problems)];
}

describe('docs/errors.md', () => {
  const doc = readFileSync(docPath, 'utf8');

  it('documents every catalogue code with its status, and no other code', () => {
    expect(compareDocWithCatalogue(doc, errorCatalogue)).toEqual([]);
    expect(tableRows(doc)).toHaveLength(Object.keys(errorCatalogue).length);
  });

  it('shows both error body shapes of docs/decisions.md item 5', () => {
    expect(doc).toContain('{"status":"failed","message":"..."}');
    expect(doc).toContain('{"Data":"","Error":"..."}');
    for (const route of ['/v1/reboot', '/v1/shutdown', '/v1/purge']) expect(doc).toContain(route);
  });

  describe('the check itself catches drift', () => {
    const catalogue = errorCatalogue as Catalogue;
    const firstCode = Object.keys(catalogue)[0]!;

    it('a code missing from the doc', () => {
      const without = doc
        .split('\n')
        .filter((l) => !l.startsWith(`| \`${firstCode}\``))
        .join('\n');
      expect(compareDocWithCatalogue(without, catalogue)).toContain(`${firstCode} has no row in docs/errors.md`);
    });

    it('a code in the doc that the catalogue lacks', () => {
      const extra = `${doc}\n| \`SUP_ERR_IMAGINARY\` | 418 | Made up. |\n`;
      expect(compareDocWithCatalogue(extra, catalogue).join('\n')).toContain('SUP_ERR_IMAGINARY is not in the catalogue');
      expect(compareDocWithCatalogue(`${doc}\nSee also SUP_ERR_GONE.\n`, catalogue).join('\n')).toContain('SUP_ERR_GONE is not in the catalogue');
    });

    it('a wrong status', () => {
      const wrong = doc.replace('| `SUP_ERR_LOCKED` | 423 |', '| `SUP_ERR_LOCKED` | 409 |');
      expect(wrong).not.toBe(doc);
      expect(compareDocWithCatalogue(wrong, catalogue).join('\n')).toContain('SUP_ERR_LOCKED is documented as 409, the catalogue says 423');
      const listed = doc.replace('Anything else: `500`', 'Anything else: `418`');
      expect(compareDocWithCatalogue(listed, catalogue).join('\n')).toContain('status 418 is not a status of any catalogue code');
    });

    it('a code that is missing from the catalogue', () => {
      const fewer = Object.fromEntries(Object.entries(catalogue).filter(([k]) => k !== 'SUP_ERR_HOST'));
      expect(compareDocWithCatalogue(doc, fewer).join('\n')).toContain('SUP_ERR_HOST is not in the catalogue');
    });
  });
});
