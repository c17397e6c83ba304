// Sums JUnit XML reports into the one closing line CI prints: "N passed, N failed, N skipped".
//
//   node scripts/junit-summary.mjs REPORT[:EXIT] ...
//
// REPORT is a JUnit file; EXIT, when given, is the exit status of the runner that wrote it.
// A runner that exited non-zero without a report, or whose report shows no failure (it
// failed before or after its tests: type errors, global setup, teardown), adds one failure,
// so a broken runner can never read as green. Remove old reports before the runners start.
import { existsSync, readFileSync } from 'node:fs';

let passed = 0;
let failed = 0;
let skipped = 0;
for (const arg of process.argv.slice(2)) {
  const match = /^(.*):(\d+)$/.exec(arg);
  const file = match ? match[1] : arg;
  const exit = match ? Number(match[2]) : 0;
  let fileFailed = 0;
  if (existsSync(file)) {
    const xml = readFileSync(file, 'utf8');
    for (const m of xml.matchAll(/<testcase\b[^>]*?(\/>|>([\s\S]*?)<\/testcase>)/g)) {
      const body = m[2] ?? '';
      if (/<(failure|error)\b/.test(body)) fileFailed++;
      else if (/<skipped\b/.test(body)) skipped++;
      else passed++;
    }
  }
  if (exit !== 0 && fileFailed === 0) {
    fileFailed = 1;
    console.error(`junit-summary: ${file} ${existsSync(file) ? 'shows no failing test' : 'was not written'}, but its runner exited ${exit}: counted as one failure`);
  }
  failed += fileFailed;
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
