/**
 * Wall time of the whole HIL suite per target, run one after the other on this machine:
 * `npx tsx bench/hil-suite.bench.mts [target ...] [--grep PATTERN]` (default: sim container;
 * `sim qemu --grep @smoke` compares the emulated board on the smoke subset). Prints each
 * target's time, its pass/skip/fail counts from its JUnit report, and the ratio to the first.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, readFileSync } from 'node:fs';

const argv = process.argv.slice(2);
const grepAt = argv.indexOf('--grep');
const grep = grepAt >= 0 ? ['--grep', argv[grepAt + 1] ?? ''] : [];
const named = argv.filter((_, i) => grepAt < 0 || (i !== grepAt && i !== grepAt + 1));
const targets = named.length ? named : ['sim', 'container'];
const rows: Array<{ target: string; seconds: number; counts: string; exit: number }> = [];

for (const target of targets) {
  const started = performance.now();
  const run = spawnSync('npm', ['run', 'hil', '--', `--project=${target}`, '--reporter=dot', ...grep], { stdio: ['ignore', 'ignore', 'inherit'] });
  const seconds = (performance.now() - started) / 1000;
  let counts = '(no JUnit report)';
  if (existsSync('hil-results/junit.xml')) {
    copyFileSync('hil-results/junit.xml', `hil-results/bench-${target}-junit.xml`);
    const head = /<testsuites[^>]*>/.exec(readFileSync('hil-results/junit.xml', 'utf8'))?.[0] ?? '';
    const attr = (name: string) => Number(new RegExp(`${name}="(\\d+)"`).exec(head)?.[1] ?? 0);
    counts = `${attr('tests')} tests, ${attr('failures') + attr('errors')} failed, ${attr('skipped')} skipped`;
  }
  rows.push({ target, seconds, counts, exit: run.status ?? 1 });
  console.log(`${target.padEnd(10)} ${seconds.toFixed(1).padStart(7)} s   ${counts}${run.status ? `   (exit ${run.status})` : ''}`);
}
const first = rows[0]!;
for (const r of rows.slice(1)) console.log(`${r.target} / ${first.target}: ${(r.seconds / first.seconds).toFixed(2)}x`);
