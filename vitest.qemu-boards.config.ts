import { defineConfig } from 'vitest/config';

// `fleetlab board install` on a running bare board (test/qemu-boards/): .ci/run boots one
// (`fleetlab qemu boot --bare --machine virt --board-config F`) and runs the install file, the
// HIL `board` project, then the uninstall file, with FLEETLAB_BOARD_CONFIG=F and
// FLEETLAB_INSTALL_BASELINE naming where the first keeps the bare board's state for the last.
export default defineConfig({
  test: {
    include: ['test/qemu-boards/**/*.test.ts'],
    testTimeout: 900_000,
    hookTimeout: 300_000,
    pool: 'forks',
    maxWorkers: 1,
    fileParallelism: false,
    reporters: ['default', 'junit'],
    outputFile: { junit: 'test-results/qemu-boards-junit.xml' },
  },
});
