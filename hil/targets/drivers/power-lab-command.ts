/**
 * `power.cycle`, `power.off`, `power.on` on a lab board: shell commands on the lab host (a
 * PDU, a relay) that the board config names. A board that does not come back after one is
 * the lab's failure, not the device's.
 */
import { spawn } from 'node:child_process';
import { FleetlabError, errorText } from '../../../src/errors.js';
import type { PowerProtocol } from '../../../device-access/protocols.js';
import type { BoardConfig } from '../../lab/board-config.js';

export interface LabPowerOptions {
  readonly commands: BoardConfig['power'];
  /** `host:port`, for the infrastructure failure. */
  readonly board: string;
  readonly labCommandMs: number;
  /** Deadline for the board to answer again when the config gives no `power.timeoutSeconds`. */
  readonly readyMs: number;
  readonly waitDown: () => Promise<void>;
  /** Back means answering again; resolves or rejects within `timeoutMs`. */
  readonly waitBack: (timeoutMs: number) => Promise<void>;
  /** Told what the lab failed at: the device's `infrastructureFailure`. */
  readonly labFailed: (failure: string) => void;
  /** Takes the board out of the lab (a worker's lease). */
  readonly markOffline?: (reason: string) => Promise<void>;
}

const powerError = (message: string, cause?: unknown) => new FleetlabError('SUP_ERR_HOST', message, cause === undefined ? undefined : { cause });

/** Runs a lab-host shell command (power switch); rejects with its output when it fails. */
function runLabCommand(what: string, command: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', command], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const keep = (chunk: Buffer) => (output = (output + chunk.toString('utf8')).slice(-2000));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(powerError(`board power ${what}: cannot run "${command}": ${err.message}`, err));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(powerError(`board power ${what}: "${command}" ${signal ? `killed by ${signal}` : `exited ${code}`}: ${output.trim() || '(no output)'}`));
    });
  });
}

/** The hard power actions the config allows; one it gives no command for rejects, naming the gap. */
export function labCommandPower(o: LabPowerOptions): Omit<PowerProtocol, 'reboot'> {
  const { cycle, off, on } = o.commands;
  const missing = (what: string) => async () => {
    throw powerError(`board power ${what}: the board config gives no command for it ("power" in ${process.env.FLEETLAB_BOARD_CONFIG ?? 'the config'})`);
  };
  /**
   * A board that does not answer within its power timeout: the test says the lab failed, and
   * a lab board leaves the lab rather than being handed to the next run, which would only
   * wait on it again.
   */
  const waitBackAfterPower = async (what: 'cycle' | 'on') => {
    const timeoutMs = o.commands.timeoutSeconds !== undefined ? o.commands.timeoutSeconds * 1000 : o.readyMs;
    try {
      await o.waitBack(timeoutMs);
    } catch (err) {
      const reason = `did not answer within ${Math.round(timeoutMs / 1000)} s after power ${what} (${errorText(err)})`;
      const failure = `board ${o.board} ${reason}`;
      o.labFailed(failure);
      let marked = '';
      if (o.markOffline) {
        marked = await o.markOffline(reason).then(
          () => '; marked offline in the lab (fleetlab lab online <board> once it is fixed)',
          (e: unknown) => `; marking it offline in the lab failed: ${errorText(e)}`,
        );
      }
      throw new FleetlabError('HIL_ERR_BOARD_OFFLINE', `infrastructure failure: ${failure}${marked}`, { cause: err });
    }
  };
  const powerOff = off === undefined ? undefined : async () => {
    await runLabCommand('off', off, o.labCommandMs);
    await o.waitDown();
  };
  const powerOn = on === undefined ? undefined : async () => {
    await runLabCommand('on', on, o.labCommandMs);
    await waitBackAfterPower('on');
  };
  return {
    cycle: cycle !== undefined
      ? async () => {
          await runLabCommand('cycle', cycle, o.labCommandMs);
          await o.waitDown();
          await waitBackAfterPower('cycle');
        }
      : powerOff && powerOn
        ? async () => {
            await powerOff();
            await powerOn();
          }
        : missing('cycle'),
    off: powerOff ?? missing('off'),
    on: powerOn ?? missing('on'),
  };
}
