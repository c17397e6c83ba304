/**
 * End-of-run summaries the built-in reporters do not give:
 * - flakes: tests that both passed and failed across repeats (`--repeat-each`) and retries,
 *   with the counts, per project;
 * - capability skips: tests skipped because the target lacks a capability, grouped by reason;
 * - other skips with a reason (a spec that runs under one project only), grouped the same way;
 * - infrastructure failures: failed tests the lab failed, not the device (a board that did not
 *   come back after its power control), apart from the device's failures;
 * - board-suspect: tests that failed on one lab board and passed, retried, on another
 *   (hil/lab/flake-attribution.ts), with the boards.
 */
import type { FullResult, Reporter, TestCase, TestResult } from '@playwright/test/reporter';

interface Tally {
  passed: number;
  failed: number;
  skipped: number;
}

const CAPABILITY_SKIP = /^target \S+ lacks capability /;

export default class FlakeReporter implements Reporter {
  readonly #tallies = new Map<string, Tally>();
  readonly #skips = new Map<string, Set<string>>();
  readonly #otherSkips = new Map<string, Set<string>>();
  readonly #infrastructure: string[] = [];
  readonly #suspect: string[] = [];

  onTestEnd(test: TestCase, result: TestResult): void {
    // Repeats are separate TestCases with one title path; the key joins them.
    const [, project, ...titles] = test.titlePath();
    const key = `[${project}] ${titles.join(' › ')}`;
    const tally = this.#tallies.get(key) ?? { passed: 0, failed: 0, skipped: 0 };
    if (result.status === 'passed') tally.passed++;
    else if (result.status === 'skipped') tally.skipped++;
    else tally.failed++;
    this.#tallies.set(key, tally);
    const infra = result.status !== 'passed' && result.status !== 'skipped' ? [...result.annotations, ...test.annotations].find((a) => a.type === 'infrastructure failure') : undefined;
    if (infra) this.#infrastructure.push(`${key}: ${infra.description ?? ''}`);
    const suspect = result.status === 'passed' ? result.annotations.find((a) => a.type === 'board-suspect') : undefined;
    if (suspect) this.#suspect.push(`${key}: ${suspect.description ?? ''}`);
    if (result.status === 'skipped') {
      for (const a of [...result.annotations, ...test.annotations]) {
        if (a.type !== 'skip' || !a.description) continue;
        const group = CAPABILITY_SKIP.test(a.description) ? this.#skips : this.#otherSkips;
        const tests = group.get(a.description) ?? new Set<string>();
        tests.add(key);
        group.set(a.description, tests);
      }
    }
  }

  onEnd(_result: FullResult): void {
    const flaky = [...this.#tallies].filter(([, t]) => t.passed > 0 && t.failed > 0);
    const lines = ['', `HIL flake summary: ${flaky.length} flaky of ${this.#tallies.size} tests`];
    for (const [key, t] of flaky) lines.push(`  FLAKY ${key}: passed ${t.passed}, failed ${t.failed} of ${t.passed + t.failed}`);
    const skipped = [...this.#skips].reduce((n, [, s]) => n + s.size, 0);
    lines.push(`HIL capability skips: ${skipped} test${skipped === 1 ? '' : 's'}`);
    for (const [reason, tests] of this.#skips) {
      lines.push(`  ${reason}: ${tests.size}`);
      for (const t of tests) lines.push(`    - ${t}`);
    }
    if (this.#infrastructure.length) {
      lines.push(`HIL infrastructure failures (the lab's, not the device's): ${this.#infrastructure.length}`);
      for (const t of this.#infrastructure) lines.push(`    - ${t}`);
    }
    if (this.#suspect.length) {
      lines.push(`HIL board-suspect (failed on one lab board, passed on another): ${this.#suspect.length}`);
      for (const t of this.#suspect) lines.push(`    - ${t}`);
    }
    for (const [reason, tests] of this.#otherSkips) {
      lines.push(`HIL skipped, ${reason}: ${tests.size}`);
      for (const t of tests) lines.push(`    - ${t}`);
    }
    console.log(lines.join('\n'));
  }

  printsToStdio(): boolean {
    return true;
  }
}
