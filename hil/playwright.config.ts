/**
 * The HIL suite: Playwright Test with no browser. One project per registered target
 * (hil/targets/index.ts), the first being the default `npm run hil` selects (hil/run.mjs).
 * Reports go under hil-results/ (or FLEETLAB_HIL_RESULTS, so that two runs at once keep theirs
 * apart): html/, junit.xml, and artifacts/ per test.
 */
import { resolve } from 'node:path';
import { defineConfig } from '@playwright/test';
import type { HilTestFixtures, HilWorkerFixtures, TimelineMode } from './harness/fixtures.js';
import { SLOW_TARGETS, targetNames } from './targets/index.js';

const env = process.env;
const results = env.FLEETLAB_HIL_RESULTS ? resolve(env.FLEETLAB_HIL_RESULTS) : '../hil-results';
// The device timeline (harness/timeline-recorder.ts): bench/timeline.bench.ts runs the suite with it on and off.
const TIMELINE_MODES: readonly TimelineMode[] = ['on', 'on-failure', 'off'];
const timeline = (env.FLEETLAB_HIL_TIMELINE ?? 'on-failure') as TimelineMode;
if (!TIMELINE_MODES.includes(timeline)) throw new Error(`FLEETLAB_HIL_TIMELINE must be one of ${TIMELINE_MODES.join(', ')}, not ${JSON.stringify(timeline)}`);

/**
 * The suite again on the sim target at older supervisor versions (`sim@<version>` projects;
 * README "The HIL suite"): each spec that needs a later endpoint skips, saying since when.
 * CI runs the API-level spec files at three versions; FLEETLAB_HIL_VERSION_MATRIX=full runs
 * every spec file at more versions (the fleet spec runs no device of the project's, and the
 * versions spec sets its own).
 */
const versionMatrix =
  env.FLEETLAB_HIL_VERSION_MATRIX === 'full'
    ? { versions: ['1.1.0', '7.20.0', '9.7.0', '10.2.0', '12.11.33', '14.6.0'], files: { testIgnore: /\/(fleet|versions)\.spec\.ts$/ } }
    : { versions: ['7.20.0', '9.7.0', '12.11.33'], files: { testMatch: /\/(info|auth|journal)\.spec\.ts$/ } };

export default defineConfig<HilTestFixtures, HilWorkerFixtures>({
  testDir: './specs',
  outputDir: `${results}/artifacts`,
  // A device test waits on reboots and a 15 s blink; generous, bounded.
  timeout: 180_000,
  expect: { timeout: 10_000 },
  retries: Number(env.FLEETLAB_HIL_RETRIES ?? 0),
  // Each worker runs its own device; two share the machine's two cores well enough. An
  // emulated board keeps both cores busy and a lab has one board: hil/run.mjs runs those on one.
  workers: Number(env.FLEETLAB_HIL_WORKERS ?? 2),
  fullyParallel: false,
  forbidOnly: Boolean(env.CI),
  globalSetup: './suite-setup.ts',
  globalTeardown: './suite-teardown.ts',
  reporter: [
    ['list'],
    ['html', { open: 'never', outputFolder: `${results}/html` }],
    ['junit', { outputFile: `${results}/junit.xml` }],
    ['./lib/flake-reporter.ts'],
  ],
  // An emulated or real board boots in minutes, and the first test of a worker waits for it.
  projects: [
    ...targetNames.map((name) => ({ name, use: { target: name, timeline }, ...(SLOW_TARGETS.has(name) ? { timeout: 900_000 } : {}) })),
    ...versionMatrix.versions.map((supervisorVersion) => ({ name: `sim@${supervisorVersion}`, use: { target: 'sim', supervisorVersion, timeline }, ...versionMatrix.files })),
  ],
});
