/**
 * `defineConfig` for a device team's `fleetlab.config.ts`: a Playwright Test config with one
 * project per target (`sim`, `container`, `qemu`, `board`), the HTML and JUnit reports in the
 * team's own directory, and the harness's global setup (images the targets need).
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig as playwrightConfig, type PlaywrightTestConfig } from '@playwright/test';
import type { HilTestFixtures, HilWorkerFixtures, TimelineMode } from './fixtures.js';
import { SLOW_TARGETS, targetNames } from '../targets/index.js';
import { checkedVersion, SUPERVISOR_VERSION_VARIABLE } from './supervisor-version.js';
import { FleetlabError } from '../../src/errors.js';

export interface FleetlabConfig {
  /** Your compose file or the directory holding it, relative to where you run fleetlab; `device.deploy()` builds it. */
  app?: string;
  /**
   * Compose keys fleetlab refuses (it cannot carry them to the device) that your app can run
   * without: each is left out of the release, with a warning at every run. A bare key name
   * (`logging`) stands for that key of every service and the top-level key of that name; a
   * dotted path names one (`services.web.logging`, `services.*.expose`, `networks.*.driver`).
   */
  ignoreComposeKeys?: string[];
  /** Where your specs are (default `fleetlab`). */
  testDir?: string;
  /** Where reports go: `html/`, `junit.xml`, `artifacts/` (default `fleetlab-report`). */
  reportDir?: string;
  /** Per-test timeout in ms (default 180 s; qemu and board get 900 s). */
  timeout?: number;
  /** Parallel devices (default 2; `fleetlab test --target qemu` gives a board per two cores, `--lab` one per matching board). */
  workers?: number;
  retries?: number;
  /**
   * `test` (default): every test gets a fresh device, so no test sees what another left.
   * `file`: one device per spec file, cheaper on slow targets (an emulated board resets in
   * tens of seconds); a failed test still gets the next one a fresh device.
   */
  deviceScope?: 'test' | 'file';
  /**
   * Spread the tests of one spec file over the workers, each on its own device (default
   * false: a file's tests run in order in one worker). Only with `deviceScope: 'test'`, where
   * no test depends on what another left; with `--target qemu --workers N` a file's tests run
   * on N boards at once.
   */
  fullyParallel?: boolean;
  /**
   * The upstream supervisor version X.Y.Z every project's device answers as (default: fleetlab's
   * own, every endpoint); `fleetlab test --supervisor-version` overrides it, and a spec file's
   * `test.use({ supervisorVersion })` overrides both. Tests marked `since()` a newer one skip.
   */
  supervisorVersion?: string;
  /**
   * The device timeline page in the report: `on-failure` (default) for failed and flaky tests,
   * `on` for every test, `off` to record nothing.
   */
  timeline?: TimelineMode;
}

/** A module of the harness by its path from here, as the running tree has it (sources or dist/). */
const harnessModule = (path: string) => fileURLToPath(new URL(`${path}${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

export function defineConfig(options: FleetlabConfig = {}): PlaywrightTestConfig<HilTestFixtures, HilWorkerFixtures> {
  // A team's app has to run for real, so the sim target uses dockerd unless told otherwise:
  // the simulated engine plays containers without running their code. Set here because the
  // config is what every worker loads.
  process.env.FLEETLAB_HIL_ENGINE ??= 'docker';
  const reportDir = resolve(options.reportDir ?? 'fleetlab-report');
  const supervisorVersion = process.env[SUPERVISOR_VERSION_VARIABLE] || options.supervisorVersion;
  // Refused here, once, rather than by every test.
  checkedVersion(supervisorVersion);
  const app = options.app === undefined ? undefined : resolve(options.app);
  if (options.fullyParallel && options.deviceScope === 'file') {
    throw new FleetlabError('HIL_ERR_CONFIG', "fullyParallel spreads a file's tests over several devices, and deviceScope 'file' has them share one: use deviceScope 'test' (the default) with it, or leave fullyParallel out");
  }
  return playwrightConfig<HilTestFixtures, HilWorkerFixtures>({
    testDir: resolve(options.testDir ?? 'fleetlab'),
    outputDir: resolve(reportDir, 'artifacts'),
    timeout: options.timeout ?? 180_000,
    expect: { timeout: 10_000 },
    retries: options.retries ?? 0,
    workers: options.workers ?? 2,
    fullyParallel: options.fullyParallel ?? false,
    forbidOnly: Boolean(process.env.CI),
    globalSetup: harnessModule('./global-setup'),
    globalTeardown: harnessModule('../suite-teardown'),
    reporter: [
      ['list'],
      ['html', { open: 'never', outputFolder: resolve(reportDir, 'html') }],
      ['junit', { outputFile: resolve(reportDir, 'junit.xml') }],
    ],
    projects: targetNames.map((name) => ({
      name,
      use: { target: name, app, ignoreComposeKeys: options.ignoreComposeKeys ?? [], deviceScope: options.deviceScope ?? 'test', timeline: options.timeline ?? 'on-failure', ...(supervisorVersion ? { supervisorVersion } : {}) },
      ...(SLOW_TARGETS.has(name) ? { timeout: Math.max(options.timeout ?? 0, 900_000) } : {}),
    })),
  });
}
