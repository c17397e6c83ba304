// Sums JUnit XML reports into the one closing line CI prints: "N passed, N failed, N skipped".
//
//   node scripts/junit-summary.mjs REPORT[:EXIT] ...
//
// REPORT is a JUnit file; EXIT, when given, is the exit status of the runner that wrote it.
// A runner that exited non-zero without a report, or whose report shows no failure (it
// failed before or after its tests: type errors, global setup, teardown), adds one failure,
// so a broken runner can never read as green. Remove old reports before the runners start.
//
// A runner that failed outside its tests gets its own words from its log (X.log beside X-junit.xml).
//
// Each failing test is named above the closing line, with its report and the start of its
// message (up to MESSAGE_LINES lines): CI keeps only the tail of a long run's output, and a
// count alone does not say where to look.
import { existsSync, readFileSync } from 'node:fs';

const MESSAGE_LINES = 40;

const attribute = (tag, name) => {
  const m = new RegExp(`\\b${name}="([^"]*)"`).exec(tag);
  return m ? unescapeXml(m[1]) : '';
};
const unescapeXml = (s) =>
  s
    .replace(/&#(x?)([0-9a-f]+);/gi, (_, hex, code) => String.fromCodePoint(parseInt(code, hex ? 16 : 10)))
    .replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&amp;/g, '&');

// What a runner said when it failed outside its tests (an unhandled error after they passed,
// a type error, a global teardown that threw: the leftover check) is in its log, X.log beside
// X-junit.xml: the part from vitest's error banner, its "error during close" or "close timed out", or tsc's first
// error on, or else the log's last lines. (Not any line that starts with "Error": tests' own
// output has plenty of those.)
const LOG_MARKER = /⎯ (Unhandled|Failed)\b|\berror TS\d+|^error during close\b|^close timed out\b/;
const TAIL_LINES = 25;
const stripAnsi = (s) => s.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '');
const runnerWords = (file) => {
  const log = file.replace(/-junit\.xml$/, '.log');
  if (log === file || !existsSync(log)) return '';
  const lines = stripAnsi(readFileSync(log, 'utf8')).split('\n').filter((line) => line.trim() !== '');
  const marker = lines.findIndex((line) => LOG_MARKER.test(line));
  const from = marker >= 0 ? marker : Math.max(0, lines.length - TAIL_LINES);
  const shown = lines.slice(from, from + MESSAGE_LINES);
  return `; from ${log}:${shown.map((line) => `\n    ${line.slice(0, 300)}`).join('')}`;
};

let passed = 0;
let failed = 0;
let skipped = 0;
const failures = [];
for (const arg of process.argv.slice(2)) {
  const match = /^(.*):(\d+)$/.exec(arg);
  const file = match ? match[1] : arg;
  const exit = match ? Number(match[2]) : 0;
  let fileFailed = 0;
  if (existsSync(file)) {
    const xml = readFileSync(file, 'utf8');
    for (const m of xml.matchAll(/<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g)) {
      const body = m[3] ?? '';
      const failure = /<(failure|error)\b([^>]*)>?/.exec(body);
      if (failure) {
        fileFailed++;
        const lines = attribute(failure[2], 'message').split('\n').filter((line) => line.trim() !== '');
        const shown = lines.slice(0, MESSAGE_LINES).map((line) => `\n    ${line.slice(0, 300)}`).join('');
        const more = lines.length > MESSAGE_LINES ? `\n    (${lines.length - MESSAGE_LINES} more lines in ${file})` : '';
        failures.push(`${file}: ${attribute(m[1], 'classname')} › ${attribute(m[1], 'name')}${shown}${more}`);
      } else if (/<skipped\b/.test(body)) skipped++;
      else passed++;
    }
  }
  if (exit !== 0 && fileFailed === 0) {
    fileFailed = 1;
    failures.push(`${file}: ${existsSync(file) ? 'shows no failing test' : 'was not written'}, but its runner exited ${exit}: counted as one failure${runnerWords(file)}`);
  }
  failed += fileFailed;
}
if (failures.length > 0) console.log(`failed:\n${failures.map((f) => `  ${f}`).join('\n')}`);
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
