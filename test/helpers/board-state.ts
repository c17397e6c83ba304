/**
 * What is on a board, for proving that `fleetlab board uninstall` leaves nothing: the root
 * filesystem's paths (not their contents), the Debian packages, the systemd unit files,
 * dockerd's config and the engine's containers, images, volumes and networks. Compared with the
 * same reading taken before the install.
 */
import { createHash } from 'node:crypto';
import type { SshDevice } from '../../device-access/ssh-device.js';

/**
 * Left out of the path listing: what the OS and dockerd change by themselves while a board runs
 * (logs, caches, the engine's and package manager's stores, systemd's timestamps). /tmp, /run
 * and the kernel's filesystems are other mounts, which `-xdev` leaves out; /tmp/fleetlab (the
 * supervisor's lock root) is read apart. Transient units (login sessions' scopes) come and go
 * with SSH sessions, so only unit files are compared.
 */
export const VOLATILE = ['/var/log', '/var/cache', '/var/tmp', '/var/lib/docker', '/var/lib/containerd', '/var/lib/systemd', '/var/lib/apt', '/var/lib/dpkg', '/var/lib/dhcp', '/var/backups', '/lost+found'] as const;

export interface BoardState {
  readonly sections: Readonly<Record<string, readonly string[]>>;
}

const SECTION = '### ';

function script(): string {
  const prune = VOLATILE.map((p) => `-path ${p}`).join(' -o ');
  return [
    'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    `echo '${SECTION}paths'`,
    `find / -xdev \\( ${prune} \\) -prune -o -print | sort`,
    '[ -e /tmp/fleetlab ] && echo /tmp/fleetlab',
    `echo '${SECTION}packages'`,
    "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' | sort",
    `echo '${SECTION}units'`,
    // systemd, busy right after a boot on a loaded machine, can time out the listing: asked again, never read as "no units".
    'i=0; until units=$(systemctl list-unit-files --no-legend --no-pager 2>&1) && [ -n "$units" ]; do i=$((i+1)); if [ $i -ge 6 ]; then echo "systemctl list-unit-files failed 6 times: $units" >&2; units=""; break; fi; sleep 5; done',
    'printf \'%s\\n\' "$units" | awk \'$2 != "transient" && NF >= 2 {print $1, $2}\' | sort',
    `echo '${SECTION}docker config'`,
    'if [ -f /etc/docker/daemon.json ]; then sha256sum /etc/docker/daemon.json; else echo none; fi',
    // dockerd may be restarting (the install and uninstall restart it): wait for it to answer.
    'i=0; until docker info >/dev/null 2>&1 || [ $i -ge 60 ]; do sleep 1; i=$((i+1)); done',
    `echo '${SECTION}engine'`,
    'docker info >/dev/null 2>&1 && echo answering || echo not answering',
    `echo '${SECTION}containers'`,
    "docker ps -a --format '{{.Names}} {{.Image}}' | sort",
    `echo '${SECTION}images'`,
    'docker image ls -q --no-trunc | sort -u',
    `echo '${SECTION}volumes'`,
    'docker volume ls -q | sort',
    `echo '${SECTION}networks'`,
    "docker network ls --format '{{.Name}}' | sort",
  ].join('\n');
}

export async function readBoardState(ssh: SshDevice): Promise<BoardState> {
  const r = await ssh.run(['sh', '-c', script()], { timeoutMs: 180_000 });
  if (r.exitCode !== 0 && r.stdout === '') throw new Error(`reading the board's state on ${ssh.where} failed (exit ${r.exitCode}): ${r.stderr}`);
  const sections: Record<string, string[]> = {};
  let current: string[] | undefined;
  for (const line of r.stdout.split('\n')) {
    if (line.startsWith(SECTION)) sections[line.slice(SECTION.length)] = current = [];
    else if (line && current) current.push(line);
  }
  // Every board here runs systemd: no units is a reading that failed, not a state to compare.
  if (!sections.units?.length) throw new Error(`reading the board's state on ${ssh.where}: no systemd units listed (${r.stderr.trim() || 'no error'})`);
  return { sections };
}

/** Every line one reading has and the other lacks, as `+ section: line` (added) and `- section: line` (gone). */
export function diffBoardState(before: BoardState, after: BoardState): string[] {
  const out: string[] = [];
  for (const name of new Set([...Object.keys(before.sections), ...Object.keys(after.sections)])) {
    const a = new Set(before.sections[name] ?? []);
    const b = new Set(after.sections[name] ?? []);
    for (const line of b) if (!a.has(line)) out.push(`+ ${name}: ${line}`);
    for (const line of a) if (!b.has(line)) out.push(`- ${name}: ${line}`);
  }
  return out;
}

export function stateDigest(state: BoardState): string {
  return createHash('sha256').update(JSON.stringify(state.sections)).digest('hex').slice(0, 12);
}
