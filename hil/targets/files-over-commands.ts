/**
 * The files protocol for a device reached only through a command runner (docker exec into
 * the container target, SSH to a board): coreutils, sh and find, which both a Debian image
 * and a lab board's OS have. Paths go as argv words, never through a shell line.
 */
import type { FilesProtocol } from './protocols.js';

export interface RawCommandResult {
  readonly exitCode: number;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
}

export type RawCommandRunner = (argv: readonly string[], options?: { input?: string | Buffer }) => Promise<RawCommandResult>;

/** `where` names the device in errors; `toError` lets a target keep its own error family. */
export function filesOverCommands(
  run: RawCommandRunner,
  where: string,
  toError: (message: string) => Error = (message) => new Error(message),
): Omit<FilesProtocol, 'volumePath'> {
  const must = async (what: string, path: string, argv: readonly string[], input?: string | Buffer) => {
    const r = await run(argv, input === undefined ? {} : { input });
    if (r.exitCode !== 0) throw toError(`${what} ${path} on ${where}: ${r.stderr.toString('utf8').trim() || `exit ${r.exitCode}`}`);
    return r.stdout;
  };
  return {
    read: (path) => must('read', path, ['cat', '--', path]),
    write: async (path, data) => {
      await must('write', path, ['sh', '-c', 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', 'fleetlab-write', path], data);
    },
    remove: async (path) => {
      await must('remove', path, ['rm', '-rf', '--', path]);
    },
    exists: async (path) => (await run(['test', '-e', path])).exitCode === 0,
    // NUL-separated: a file name may hold a newline.
    list: async (path) =>
      (await must('list', path, ['find', path, '-mindepth', '1', '-maxdepth', '1', '-printf', '%f\\0']))
        .toString('utf8')
        .split('\0')
        .filter(Boolean)
        .sort(),
  };
}
