/**
 * `disk.fill` on a board, over its shell: a file at the root of each filesystem that holds
 * one of `paths` takes every free block, root's reserve too (the engine and the supervisor run
 * as root, so a fill that left the reserve would not fill their disk). The blocks are
 * allocated, not written: a full card in a fraction of a second, and nothing to copy.
 */
import { FleetlabError } from '../../../src/errors.js';
import type { CommandProtocol, DiskProtocol } from '../../../device-access/protocols.js';

const FILL_NAME = '.fleetlab-disk-fill';

// Per path: its mount point, then the largest allocation that succeeds (what is free less the
// extent metadata the allocation itself needs, found by stepping down a MiB at a time).
const FILL = `set -e
for p in "$@"; do
  m=$(df --output=target "$p" | tail -n 1)
  f="$m/${FILL_NAME}"
  [ -e "$f" ] && continue
  free=$(( $(stat -f -c '%f' "$m") * $(stat -f -c '%S' "$m") ))
  i=0
  until fallocate -l "$free" "$f" 2>/dev/null; do
    rm -f "$f"; free=$(( free - 1048576 )); i=$(( i + 1 ))
    [ "$i" -lt 64 ] && [ "$free" -gt 0 ] || { echo "could not fill $m" >&2; exit 1; }
  done
  echo "$m"
done
sync`;

const FREE = `for p in "$@"; do rm -f "$(df --output=target "$p" | tail -n 1)/${FILL_NAME}"; done; sync`;

export function diskFill(shell: CommandProtocol, paths: readonly string[]): DiskProtocol {
  const run = async (what: string, script: string) => {
    const r = await shell.run(['sh', '-c', script, what, ...paths]);
    if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `disk.${what}: ${(r.stderr || r.stdout).trim() || `exited ${r.exitCode}`}`);
  };
  return {
    fill: () => run('fill', FILL),
    free: () => run('free', FREE),
  };
}
