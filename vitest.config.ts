import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The packed-package checks have their own config (vitest.package.config.ts, npm run test:package),
    // and so do the install checks on a bare QEMU board (vitest.qemu-boards.config.ts, .ci/run).
    exclude: ['test/package/**', 'test/qemu-boards/**', '**/node_modules/**'],
    globalSetup: ['test/global-setup.ts'],
    setupFiles: ['test/leftovers-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Most files wait on dockerd, sockets and timers, not the CPU: on a 2-core machine three
    // forks ran the suite in 7m41s using 1.2 cores on average (.ci/run's npm test step, tsc
    // included, took 9m19s with two).
    maxWorkers: 3,
    reporters: ['default', 'junit'],
    outputFile: { junit: 'test-results/vitest-junit.xml' },
  },
});
