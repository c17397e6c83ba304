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
    // Three forks on a 2-core machine: .ci/run's npm test step keeps both cores 95 % busy with
    // them (vmstat beside it, 12m17s), so more forks would not shorten it; fewer leave the
    // files that wait on dockerd and timers idle (two took 9m19s when the suite was smaller).
    maxWorkers: 3,
    reporters: ['default', 'junit'],
    outputFile: { junit: 'test-results/vitest-junit.xml' },
  },
});
