/** `led` on a board through the lab: a lab-host command that watches the line. */
import { spawn, type ChildProcess } from 'node:child_process';
import { FleetlabError } from '../../../src/errors.js';
import { sleep } from '../../lib/wait.js';
import { lineSplitter, TransitionLog, type LedObserver } from './led-transition-log.js';

/** Between runs of a command that exited: a broken command is not restarted in a tight loop. */
const RESTART_MS = 1000;

/**
 * Runs a lab-host command that prints the line's level as `0`/`1` lines (a GPIO input of the
 * lab host wired to the LED, a logic analyser...). It sees the line through reboots and power
 * cuts, which the sysfs observer cannot. Restarted when it exits.
 */
export function observeLedByCommand(command: string, gpioDescription: string): LedObserver {
  const log = new TransitionLog();
  let stopped = false;
  let child: ChildProcess | undefined;
  let lastError = '';
  const running = (async () => {
    while (!stopped) {
      // Its own process group, so stop() ends whatever the command started too.
      child = spawn('sh', ['-c', command], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      child.stdout!.on('data', lineSplitter((v) => log.record(v)));
      child.stderr!.on('data', (chunk: Buffer) => (lastError = chunk.toString('utf8').trim().slice(-500)));
      await new Promise<void>((resolve) => child!.once('close', () => resolve()).once('error', () => resolve()));
      if (!stopped) await sleep(RESTART_MS);
    }
  })();
  return {
    line: `${gpioDescription} (observed by lab command: ${command})`,
    level: async () => {
      if (log.last === undefined && lastError) throw new FleetlabError('SUP_ERR_HOST', `LED observer command printed no level: ${lastError}`);
      return log.last ?? 0;
    },
    transitions: async (sinceMs = 0) => log.since(sinceMs),
    stop: async () => {
      stopped = true;
      const pid = child?.pid;
      if (pid !== undefined && child?.exitCode === null) {
        try {
          process.kill(-pid, 'SIGTERM');
        } catch {
          // already gone
        }
      }
      await running;
    },
  };
}
