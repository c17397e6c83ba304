/** `journal` of a simulated device: journal-remote's files in the device's data dir, read with journalctl. */
import { journalEntries } from '../../../device-access/journal-json.js';
import type { CommandProtocol, JournalProtocol } from '../../../device-access/protocols.js';

/** `run` is where journalctl runs and `dir` is the directory as it sees it. */
export function journalInDirectory(run: CommandProtocol['run'], dir: string): JournalProtocol {
  return {
    entries: async (options = {}) => {
      const argv = ['journalctl', '--directory', dir, '--no-pager', '-o', 'json', '--lines', String(options.lines ?? 500)];
      if (options.unit) argv.push('--unit', options.unit);
      const r = await run(argv);
      return journalEntries(r.stdout, r.exitCode);
    },
  };
}
