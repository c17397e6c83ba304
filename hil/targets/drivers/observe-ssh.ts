/**
 * What the timeline watches on a board reached over SSH (the qemu and board targets): the
 * board's dockerd through a forwarded socket, the supervisor unit's /proc through one streaming
 * channel, and the serial console the lab host reads. Update locks are not polled: a file check
 * over SSH every second would cost an emulated board more than the test it watches; the
 * journal lane carries the supervisor's own "Updates are locked" lines instead.
 */
import type { ObserveProtocol } from '../../../device-access/protocols.js';
import type { SerialConsole } from '../../../device-access/serial-console.js';
import type { SshDevice } from '../../../device-access/ssh-device.js';
import { sshUnitUsage } from './supervisor-usage.js';

export function sshObserve(board: { ssh: SshDevice; unit: string; engineSocket?: () => Promise<string>; console: () => SerialConsole | undefined }): ObserveProtocol {
  const usage = sshUnitUsage(board.ssh, board.unit);
  const missing = ["update locks: not read over SSH (too costly once a second); the journal shows the supervisor's \"Updates are locked\" lines"];
  if (!board.engineSocket) missing.push('container events: no engine socket forwarded from this board');
  return {
    ...(board.engineSocket ? { engineSocket: board.engineSocket } : {}),
    supervisorUsage: () => usage.usage(),
    consoleLines: async (sinceMs) => board.console()?.lines(sinceMs) ?? [],
    missing,
    close: () => usage.close(),
  };
}
