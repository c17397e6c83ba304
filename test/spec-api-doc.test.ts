/**
 * What `fleetlab/test` exports is what docs/spec-api.md documents: every exported name is
 * named in the doc (in backticks), so nothing reaches users undocumented.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const read = (path: string) => readFileSync(fileURLToPath(new URL(path, import.meta.url)), 'utf8');

/** Names an index module exports: `export { a, type B as C } from ...`. */
function exportedNames(text: string): string[] {
  const names: string[] = [];
  for (const m of text.matchAll(/^export (?:type )?\{([^}]*)\}/gm)) {
    for (const part of m[1]!.split(',')) {
      const words = part.trim().replace(/^type\s+/, '').split(/\s+as\s+/);
      const name = words[words.length - 1]!.trim();
      if (name) names.push(name);
    }
  }
  return names;
}

describe('docs/spec-api.md', () => {
  const names = exportedNames(read('../hil/harness/index.ts'));
  const doc = read('../docs/spec-api.md');

  it('reads the export list', () => {
    expect(names).toEqual(expect.arrayContaining(['test', 'expect', 'defineConfig', 'Device', 'Fixtures']));
  });

  it('documents every name fleetlab/test exports', () => {
    expect(names.filter((n) => !doc.includes(`\`${n}\``) && !doc.includes(`\`${n}(`))).toEqual([]);
  });
});
