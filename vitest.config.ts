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
    maxWorkers: 2,
    reporters: ['default', 'junit'],
    outputFile: { junit: 'test-results/vitest-junit.xml' },
  },
});
