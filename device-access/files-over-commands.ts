/**
 * The files protocol for a device reached only through a command runner (docker exec into
 * the container target, SSH to a board, a helper container of the engine): POSIX sh with its
 * test and printf, cat, mkdir and rm, which a Debian image, a lab board's OS and busybox all
 * have. Paths go as argv words, never through a shell line.
 */
import type { FilesProtocol } from './protocols.js';

export interface RawCommandResult {
  readonly exitCode: number;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
}

const LIST_SCRIPT = [
  'cd -- "$1" || exit 1',
  'for f in * .[!.]* ..?*; do',
  '  if [ -e "$f" ] || [ -L "$f" ]; then printf \'%s\\0\' "$f"; fi',
  'done',
].join('\n');

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
      await must('write', path, ['sh', '-c', 'case $1 in */*) d=${1%/*};; *) d=.;; esac; mkdir -p -- "${d:-/}" && cat > "$1"', 'fleetlab-write', path], data);
    },
    remove: async (path) => {
      await must('remove', path, ['rm', '-rf', '--', path]);
    },
    exists: async (path) => (await run(['sh', '-c', '[ -e "$1" ]', 'fleetlab-exists', path])).exitCode === 0,
    // NUL-separated: a file name may hold a newline. The three globs are every name but . and ..
    list: async (path) =>
      (await must('list', path, ['sh', '-c', LIST_SCRIPT, 'fleetlab-list', path]))
        .toString('utf8')
        .split('\0')
        .filter(Boolean)
        .sort(),
  };
}
