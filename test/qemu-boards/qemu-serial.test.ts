/**
 * The qemu target's serial console in a failed test's report, as a lab board's: the target
 * reads its board's console on a pty with arrival times, so a failed test gets what the board
 * printed from the test's start, not the tail of its boot.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { failedRunSerialConsole, writeTeam } from './board-under-test.js';

describe('the qemu target\'s serial console', () => {
  let dir: string | undefined;
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('is attached to a failed test from the test\'s start, with what the board printed during it', async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-qemu-serial-'));
    const marker = `fleetlab-serial-${randomBytes(6).toString('hex')}`;
    writeTeam(dir, {
      'console.spec.ts': `import { expect, test } from 'fleetlab/test';

test('the board prints on its console, then the test fails', async ({ device }) => {
  const printed = await device.exec!.run(['sh', '-c', 'echo ${marker} > /dev/console']);
  expect(printed.exitCode).toBe(0);
  expect('this test').toBe('failing on purpose');
});
`,
    });
    const text = await failedRunSerialConsole(dir, 'qemu', { FLEETLAB_QEMU_MACHINE: 'virt' });
    expect(text).toMatch(new RegExp(`^\\d\\d:\\d\\d:\\d\\d\\.\\d{3} ${marker}$`, 'm'));
    // From the test's start, not the boot's tail.
    expect(text).not.toMatch(/Booting Linux|Run \/init as init process/);
  });
});
