import { defineConfig } from 'vitest/config';

// `npm run test:package`: the packed tarball installed as a device team installs it
// (test/package/), by root and by a user in the docker group. Minutes, not seconds: four npm
// installs and the harness runs of each. One file at a time: ci-runner.test.ts takes the base
// image away for its run.
export default defineConfig({
  test: {
    include: ['test/package/**/*.test.ts'],
    globalSetup: ['test/package/global-setup.ts'],
    testTimeout: 600_000,
    hookTimeout: 900_000,
    pool: 'forks',
    maxWorkers: 1,
    reporters: ['default', 'junit'],
    outputFile: { junit: 'test-results/package-vitest-junit.xml' },
  },
});
