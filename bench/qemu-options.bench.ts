/**
 * What QEMU's options do to a boot of the emulated board (issue 45 item 2):
 * `npx tsx bench/qemu-options.bench.ts [--rounds N] [--variants a,b,...]`
 *
 * Boots `virt` from a fresh overlay to the supervisor's first `/ping`, once per variant per
 * round, the variants in a new order each round (rotated) so a noisy stretch of the machine
 * falls on each alike. Prints each boot with the machine's load average at its start, then
 * per variant the median and range, and its ratio to QEMU's defaults (`default`: 2 vCPUs, TCG
 * with one thread per vCPU, the disk's writeback cache). A boot is what the qemu target pays
 * for a board it cannot restore, and a power cut; a restore does not boot.
 *
 * The machine (raspi3b against virt) and the network device (raspi3b's USB adapter against
 * virtio-net) go together: `bench/qemu.bench.ts --machines raspi3b,virt` compares them.
 */
import { loadavg } from 'node:os';
import { bootBoard } from '../qemu/boot.js';
import { buildImage } from '../device-image/build.js';
import type { QemuTuning } from '../qemu/qemu-argv.js';

interface Variant {
  readonly what: string;
  readonly cpus?: number;
  readonly tuning?: QemuTuning;
}

const VARIANTS: Record<string, Variant> = {
  default: { what: "QEMU's defaults: 2 vCPUs, multi-threaded TCG, writeback cache" },
  'tcg-single': { what: 'one TCG thread for both vCPUs', tuning: { tcgThreads: 'single' } },
  'smp-1': { what: 'one vCPU', cpus: 1 },
  'cache-unsafe': { what: "the disk's flushes dropped on the host (cache=unsafe)", tuning: { diskCache: 'unsafe' } },
};

const args = process.argv.slice(2);
const valueOf = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const rounds = Number(valueOf('--rounds') ?? 2);
const chosen = (valueOf('--variants') ?? Object.keys(VARIANTS).join(',')).split(',');
for (const name of chosen) if (!VARIANTS[name]) throw new Error(`no variant ${name}; the variants: ${Object.keys(VARIANTS).join(', ')}`);
if (!Number.isInteger(rounds) || rounds < 1 || rounds > 20) throw new Error(`--rounds takes 1 to 20, not ${valueOf('--rounds')}`);

const repoRoot = new URL('..', import.meta.url).pathname;
const { image } = await buildImage({ repoRoot });
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

const times = new Map<string, number[]>(chosen.map((n) => [n, []]));
for (let round = 0; round < rounds; round++) {
  const order = chosen.map((_, i) => chosen[(i + round) % chosen.length]!);
  for (const name of order) {
    const v = VARIANTS[name]!;
    const load = loadavg()[0]!.toFixed(2);
    const { board, ready } = await bootBoard({ image, machine: 'virt', snapshot: true, readyTimeoutMs: 900_000, ...(v.cpus !== undefined ? { cpus: v.cpus } : {}), ...(v.tuning ? { tuning: v.tuning } : {}) });
    await board.stop();
    times.get(name)!.push(ready.bootMs);
    console.log(`round ${round + 1}/${rounds}  ${name.padEnd(13)} boot to API ready ${seconds(ready.bootMs)}  (load average at start ${load})`);
  }
}

const base = times.get('default') ? median(times.get('default')!) : undefined;
console.log(`\nvirt, boot to API ready, ${rounds} round(s), QEMU's order rotated each round`);
for (const name of chosen) {
  const t = times.get(name)!;
  const ratio = base === undefined ? '' : `  ${(median(t) / base).toFixed(2)}x of default`;
  console.log(`  ${name.padEnd(13)} median ${seconds(median(t))}  (${seconds(Math.min(...t))}-${seconds(Math.max(...t))})${ratio}  ${VARIANTS[name]!.what}`);
}
