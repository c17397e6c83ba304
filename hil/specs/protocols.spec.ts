/**
 * The target's own protocols behave as device-access/protocols.ts promises, so the specs that
 * rely on them fail for device reasons, not harness ones.
 */
import { expect, test } from 'fleetlab/test';

test('exec runs argv on the device and reports exit codes without throwing', async ({ device, needs }) => {
  needs('exec');
  const ok = await device.exec!.run(['sh', '-c', 'echo $((6 * 7)); echo err >&2']);
  expect(ok).toEqual({ exitCode: 0, stdout: '42\n', stderr: 'err\n' });
  const failed = await device.exec!.run(['sh', '-c', 'exit 3']);
  expect(failed.exitCode).toBe(3);
  const input = await device.exec!.run(['cat'], { input: 'piped' });
  expect(input.stdout).toBe('piped');
});

test('files writes, reads, lists and removes device paths', async ({ device, needs }) => {
  needs('files');
  const dir = `${device.api.identity.lockRoot}/hil-files-check`;
  await device.files!.write(`${dir}/a.txt`, 'alpha');
  expect((await device.files!.read(`${dir}/a.txt`)).toString()).toBe('alpha');
  expect(await device.files!.list(dir)).toEqual(['a.txt']);
  await device.files!.remove(dir);
  expect(await device.files!.exists(dir)).toBe(false);
});

test('the LED line is idle and off on a device that was not asked to blink', async ({ device, needs }) => {
  needs('led');
  expect(await device.led!.level()).toBe(0);
  expect(device.led!.line).toEqual(expect.any(String));
});
