/**
 * A lab board's serial console in a failed test's report: the installed bare board (booted
 * with `qemu boot --serial-pty`, its console on a pseudo-terminal as a Pi's is on a USB serial
 * adapter, named by `serial` in its board config) runs a team's spec through `fleetlab test
 * --target board`; the spec has the board print a line on its console, then fails. The report
 * must carry that line in its "serial console" attachment, and not the boot from minutes before.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { boardUnderTest, failedRunSerialConsole, writeTeam } from './board-under-test.js';

const { config } = boardUnderTest();

describe('the serial console of a lab board', () => {
  let dir: string | undefined;
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('is attached to a failed test from the test\'s start, with what the board printed during it', async () => {
    expect(config.serial, 'the board config names the console (qemu boot --serial-pty --board-config)').toBeDefined();
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-serial-team-'));
    const marker = `fleetlab-serial-${randomBytes(6).toString('hex')}`;
    const earlier = `${marker}-earlier`;
    writeTeam(dir, { 'console.spec.ts': `import { expect, test } from 'fleetlab/test';

test('an earlier test prints on the console and passes', async ({ device }) => {
  expect((await device.exec!.run(['sh', '-c', 'echo ${earlier} > /dev/console'])).exitCode).toBe(0);
  // Past the slice's margin before the next test starts.
  await new Promise((r) => setTimeout(r, 7000));
});

test('the board prints on its console, then the test fails', async ({ device }) => {
  const printed = await device.exec!.run(['sh', '-c', 'echo ${marker} > /dev/console']);
  expect(printed.exitCode).toBe(0);
  expect('this test').toBe('failing on purpose');
});
` });
    const text = await failedRunSerialConsole(dir, 'board', { FLEETLAB_BOARD_CONFIG: process.env.FLEETLAB_BOARD_CONFIG! });
    expect(text).toMatch(new RegExp(`^\\d\\d:\\d\\d:\\d\\d\\.\\d{3} ${marker}$`, 'm'));
    // The slice starts at the failed test (less a few seconds), not at the capture's start.
    expect(text).not.toContain(earlier);
  });
});
