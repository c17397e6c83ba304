/**
 * The supervisor's CPU time and RSS for the device timeline, read from /proc: on this host for
 * the sim and container targets (the supervisor is a process of this machine's kernel), over
 * one SSH channel for the qemu and board targets, where one bash loop prints a sample a second
 * and forks nothing per sample (as the sysfs LED observer does: a fork costs ~120 ms on the
 * emulated Pi).
 */
import { readdir, readFile } from 'node:fs/promises';
import type { ProcessUsage } from '../../../device-access/protocols.js';
import type { SshDevice } from '../../../device-access/ssh-device.js';

/** Linux reports CPU times in USER_HZ, 100 on every architecture it ships for. */
const TICKS_PER_SECOND = 100;
/** How often the host's process tree is walked again for new children (a restarted supervisor). */
const RESCAN_SAMPLES = 10;

/** utime + stime (fields 14 and 15) of /proc/PID/stat, in ticks; the command in field 2 may hold spaces. */
export function statTicks(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

const statParent = (stat: string) => Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);

/** Resident pages, the second field of /proc/PID/statm. */
export const statmPages = (statm: string) => Number(statm.split(' ')[1]);

/**
 * The usage of `root` and every process under it, summed: the supervisor may run behind a
 * wrapper (unshare, a node loader) whose children do the work.
 */
export function hostProcessTree(root: () => Promise<number | undefined>, pageSize = 4096): { usage(): Promise<ProcessUsage | undefined> } {
  let pids: number[] = [];
  let rootPid: number | undefined;
  let samples = 0;
  const rescan = async () => {
    rootPid = await root();
    if (rootPid === undefined) return (pids = []);
    const parents = new Map<number, number[]>();
    for (const name of await readdir('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => undefined);
      if (!stat) continue;
      const ppid = statParent(stat);
      parents.set(ppid, [...(parents.get(ppid) ?? []), Number(name)]);
    }
    const out = [rootPid];
    for (let i = 0; i < out.length && out.length < 256; i++) out.push(...(parents.get(out[i]!) ?? []));
    return (pids = out);
  };
  return {
    async usage() {
      if (samples++ % RESCAN_SAMPLES === 0 || pids.length === 0) await rescan();
      let ticks = 0;
      let pages = 0;
      let alive = false;
      for (const pid of pids) {
        const [stat, statm] = await Promise.all([readFile(`/proc/${pid}/stat`, 'utf8'), readFile(`/proc/${pid}/statm`, 'utf8')]).catch(() => [undefined, undefined]);
        if (!stat || !statm) continue;
        alive ||= pid === rootPid;
        ticks += statTicks(stat);
        pages += statmPages(statm);
      }
      if (!alive) {
        pids = []; // gone: found again at the next sample
        return undefined;
      }
      return { cpuSeconds: ticks / TICKS_PER_SECOND, rssBytes: pages * pageSize };
    },
  };
}

/** The process on this host whose command line matches, among `under`'s descendants (a device container's init). */
export async function hostDescendant(under: number, command: RegExp): Promise<number | undefined> {
  const children = new Map<number, number[]>();
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => undefined);
    if (stat) children.set(statParent(stat), [...(children.get(statParent(stat)) ?? []), Number(name)]);
  }
  const queue = [under];
  for (let i = 0; i < queue.length && i < 512; i++) {
    const pid = queue[i]!;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (pid !== under && command.test(cmdline.replace(/\0/g, ' '))) return pid;
    queue.push(...(children.get(pid) ?? []));
  }
  return undefined;
}

/**
 * Prints `ticks rss-pages` once a second for the process whose pid the command in $1 prints
 * (the unit's main pid), `-` while there is none; the first line is the page size. `read -t 1`
 * on the channel's silent stdin is the pause; the loop ends when the harness closes the channel.
 * The pid command runs only when the pid it gave is gone.
 */
export const USAGE_LOOP = `getconf PAGESIZE; pid=; while :; do if [ -z "$pid" ] || [ ! -r /proc/$pid/stat ]; then pid=$(sh -c "$1" 2>/dev/null); [ "$pid" = 0 ] && pid=; fi; s=; m=; [ -n "$pid" ] && { read -r s < /proc/$pid/stat; read -r m < /proc/$pid/statm; } 2>/dev/null; if [ -n "$s" ] && [ -n "$m" ]; then r=\${s##*) }; set -- "$1" $r; t=$(( \${13} + \${14} )); set -- "$1" $m; echo "$t $3" || exit 0; else echo - || exit 0; fi; read -r -t 1 _; [ $? -gt 128 ] || exit 0; done`;

/** Where the usage loop runs: the observer's own SSH session, told when a command over it failed. */
export interface UsageSession {
  /** Connected; rejects while the session rests after a failure (a failed connect starts a rest). */
  device(): Promise<SshDevice>;
  failed(err: unknown): void;
}

/** The supervisor's usage on a board over SSH: a follower started on the first ask, kept until close. */
export function sshPidUsage(session: UsageSession, pidCommand: string): { usage(): Promise<ProcessUsage | undefined>; close(): Promise<void> } {
  let latest: ProcessUsage | undefined;
  let pageSize: number | undefined;
  let stopped = false;
  let follower: Promise<{ stop(): void; done: Promise<unknown> }> | undefined;
  let partial = '';
  const onLine = (line: string) => {
    if (pageSize === undefined) return void (pageSize = Number(line) || 4096);
    const [ticks, pages] = line.split(' ').map(Number);
    latest = line === '-' || ticks === undefined || pages === undefined ? undefined : { cpuSeconds: ticks / TICKS_PER_SECOND, rssBytes: pages * pageSize };
  };
  const start = async () => {
    const device = await session.device();
    try {
      return await device.follow(['bash', '-c', USAGE_LOOP, 'fleetlab-usage', pidCommand], (chunk) => {
        const lines = (partial + chunk.toString('utf8')).split('\n');
        partial = lines.pop() ?? '';
        lines.forEach(onLine);
      });
    } catch (err) {
      session.failed(err);
      throw err;
    }
  };
  const forget = () => {
    follower = undefined;
    pageSize = undefined;
    latest = undefined;
    partial = '';
  };
  return {
    async usage() {
      if (stopped) return undefined;
      if (!follower) {
        follower = start();
        // A channel that ended (a reboot dropped the connection) is started again at the next ask.
        follower.then((f) => f.done.finally(forget), forget);
      }
      return latest;
    },
    async close() {
      stopped = true;
      const f = await follower?.catch(() => undefined);
      f?.stop();
    },
  };
}
