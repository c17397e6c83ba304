/**
 * CI's closing line (scripts/junit-summary.mjs) on real JUnit files as vitest and Playwright
 * write them: the counts, the failing tests named above the line, and a runner that failed
 * outside its tests counted as a failure.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-junit-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const summary = (...args: string[]): { stdout: string; status: number } => {
  try {
    return { stdout: execFileSync(process.execPath, ['scripts/junit-summary.mjs', ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }), status: 0 };
  } catch (e) {
    const err = e as { stdout: string; status: number };
    return { stdout: err.stdout, status: err.status };
  }
};

const report = (name: string, cases: string): string => {
  const file = join(dir, name);
  writeFileSync(file, `<?xml version="1.0" encoding="UTF-8" ?>\n<testsuites><testsuite name="s">${cases}</testsuite></testsuites>\n`);
  return file;
};

it('sums the reports and names each failing test with the start of its message', () => {
  const vitest = report(
    'vitest.xml',
    `<testcase classname="test/a.test.ts" name="passes" time="0.1"></testcase>
     <testcase classname="test/a.test.ts" name="is skipped" time="0"><skipped/></testcase>
     <testcase classname="test/crash-safety.test.ts" name="kill at point 17 &amp; restart" time="3">
       <failure message="not converged: worker &quot;api&quot; not running&#10;second line" type="AssertionError">stack</failure>
     </testcase>`,
  );
  const hil = report('hil.xml', `<testcase name="GET /ping answers" classname="api.spec.ts" time="1"/>`);
  const { stdout } = summary(`${vitest}:1`, `${hil}:0`);
  const lines = stdout.trimEnd().split('\n');
  expect(lines.at(-1)).toBe('2 passed, 1 failed, 1 skipped');
  expect(stdout).toContain(`${vitest}: test/crash-safety.test.ts › kill at point 17 & restart\n    not converged: worker "api" not running\n    second line\n`);
});

it('a long message is cut after 40 lines, saying how many more the report holds', () => {
  const long = Array.from({ length: 45 }, (_, i) => `log line ${i + 1}`).join('&#10;');
  const vitest = report('vitest.xml', `<testcase classname="t" name="long"><failure message="${long}">stack</failure></testcase>`);
  const { stdout } = summary(`${vitest}:1`);
  expect(stdout).toContain('    log line 40\n    (5 more lines in ');
  expect(stdout).not.toContain('log line 41');
});

it('a runner that exited non-zero without a failing test, or without a report, counts one failure and says so', () => {
  const green = report('green.xml', `<testcase classname="x" name="ok"/>`);
  const { stdout } = summary(`${green}:2`, `${join(dir, 'missing.xml')}:1`);
  expect(stdout).toContain(`${green}: shows no failing test, but its runner exited 2`);
  expect(stdout).toContain(`missing.xml: was not written, but its runner exited 1`);
  expect(stdout.trimEnd().split('\n').at(-1)).toBe('1 passed, 2 failed');
});

it('all green: the closing line alone', () => {
  const green = report('green.xml', `<testcase classname="x" name="ok"/>`);
  expect(summary(`${green}:0`).stdout).toBe('1 passed, 0 failed\n');
});

it("a runner that failed outside its tests gets its own words from its log: from vitest's error banner, or else the log's tail", () => {
  const vitest = report('vitest-junit.xml', `<testcase classname="x" name="ok"/>`);
  const noise = Array.from({ length: 30 }, (_, i) => `passing output ${i + 1}`);
  writeFileSync(
    join(dir, 'vitest.log'),
    [...noise, '\x1b[31m⎯⎯⎯⎯ Unhandled Errors ⎯⎯⎯⎯\x1b[39m', 'Error: socket hang up', ' ❯ test/api.test.ts:12:3', '', ' Test Files  1 passed (1)'].join('\n'),
  );
  const hil = report('hil-sim-junit.xml', `<testcase classname="x" name="ok"/>`);
  writeFileSync(join(dir, 'hil-sim.log'), [...noise, 'Error in global teardown: the engine went away'].join('\n'));
  const { stdout } = summary(`${vitest}:1`, `${hil}:1`);
  expect(stdout).toContain(`${vitest}: shows no failing test, but its runner exited 1: counted as one failure; from ${join(dir, 'vitest.log')}:\n    ⎯⎯⎯⎯ Unhandled Errors ⎯⎯⎯⎯\n    Error: socket hang up\n    ❯ test/api.test.ts:12:3\n`.replace('    ❯', '     ❯'));
  expect(stdout).not.toContain('passing output 30\n    ⎯');
  // No banner: the last 25 lines, the error last among them.
  expect(stdout).toContain(`from ${join(dir, 'hil-sim.log')}:\n    passing output 7\n`);
  expect(stdout).toContain('    Error in global teardown: the engine went away\n');
  expect(stdout).not.toContain('passing output 6\n');
});

it("the leftover check's error from vitest's global teardown is shown from its first line", () => {
  const vitest = report('vitest-junit.xml', `<testcase classname="x" name="ok"/>`);
  const words = ['error during close FleetlabError: the run left 1 thing(s) behind (removed now):', '  container fleetlab-x (test/api.test.ts)'];
  writeFileSync(join(dir, 'vitest.log'), [...Array.from({ length: 30 }, (_, i) => `passing output ${i + 1}`), ...words, ...Array.from({ length: 30 }, () => '    at stack')].join('\n'));
  expect(summary(`${vitest}:1`).stdout).toContain(`vitest.log:\n    ${words[0]}\n    ${words[1]}\n`);
});
