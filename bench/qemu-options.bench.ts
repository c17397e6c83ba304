/**
 * What QEMU's options do to a boot of the emulated board (issue 45 item 2):
 * `npx tsx bench/qemu-options.bench.ts [--rounds N] [--variants a,b,...] [--image-before DIR]`
 *
 * `--image-before <cache>/qemu/image-<key>` adds the variant `before`: that image (an earlier
 * build kept in the cache) booted with the defaults, side by side with this build's, for what
 * a change to the image did to its boot.
 *
 * Boots `virt` from a fresh overlay to the supervisor's first `/ping`, once per variant per
 * round, the variants in a new order each round (rotated) so a noisy stretch of the machine
 * falls on each alike. Prints each boot with the machine's load average at its start, then
 * per variant the median and range, and its ratio to fleetlab's defaults (`default`: 2 vCPUs, TCG
 * with one thread per vCPU, the disk's writeback cache, kpti=0). A boot is what the qemu target pays
 * for a board it cannot restore, and a power cut; a restore does not boot.
 *
 * The machine (raspi3b against virt) and the network device (raspi3b's USB adapter against
 * virtio-net) go together: `bench/qemu.bench.ts --machines raspi3b,virt` compares them.
 */
import { existsSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { bootBoard, type QemuBoard } from '../qemu/boot.js';
import { buildImage, imageFromDir, type QemuImage } from '../device-image/build.js';
import type { QemuTuning } from '../qemu/qemu-argv.js';
import { SshDevice } from '../device-access/ssh-device.js';

interface Variant {
  readonly what: string;
  readonly cpus?: number;
  readonly tuning?: QemuTuning;
  readonly image?: QemuImage;
}

const VARIANTS: Record<string, Variant> = {
  default: { what: "fleetlab's defaults: 2 vCPUs, multi-threaded TCG, writeback cache, kpti=0" },
  'tcg-single': { what: 'one TCG thread for both vCPUs', tuning: { tcgThreads: 'single' } },
  'smp-1': { what: 'one vCPU', cpus: 1 },
  'cache-unsafe': { what: "the disk's flushes dropped on the host (cache=unsafe)", tuning: { diskCache: 'unsafe' } },
  'kpti-on': { what: "the guest kernel's page table isolation, which it forces on for KASLR (the default boots with kpti=0)", tuning: { kernelKpti: true } },
};

const args = process.argv.slice(2);
const valueOf = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const rounds = Number(valueOf('--rounds') ?? 2);
const before = valueOf('--image-before');
if (before !== undefined) {
  if (!existsSync(`${before}/manifest.json`)) throw new Error(`--image-before takes an image directory of the cache (<cache>/qemu/image-<key>, with its manifest.json), not ${before}`);
  VARIANTS.before = { what: `the image ${before.split('/').pop()} with QEMU's defaults`, image: imageFromDir(before) };
  if (!args.includes('--variants')) args.push('--variants', 'default,before');
}
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

/** systemd's own account of the boot and the coldplug's share of it, read over SSH: what the boot time depends on. */
async function guestAccount(board: QemuBoard, image: QemuImage): Promise<string> {
  const ssh = new SshDevice({ host: '127.0.0.1', port: board.info.sshPort, username: 'root', privateKey: readFileSync(image.sshKey) });
  try {
    await ssh.waitReachable(120_000);
    const total = (await ssh.run(['systemd-analyze', 'time'])).stdout.split('\n')[0]?.replace(/^Startup finished in /, '') ?? '';
    const trigger = (await ssh.run(['sh', '-c', 'systemd-analyze blame | grep -m1 systemd-udev-trigger'])).stdout.trim();
    return `systemd: ${total}; ${trigger || 'udev trigger not in blame'}`;
  } catch (err) {
    return `systemd-analyze over SSH failed: ${String(err)}`;
  } finally {
    await ssh.close();
  }
}

const times = new Map<string, number[]>(chosen.map((n) => [n, []]));
for (let round = 0; round < rounds; round++) {
  const order = chosen.map((_, i) => chosen[(i + round) % chosen.length]!);
  for (const name of order) {
    const v = VARIANTS[name]!;
    const load = loadavg()[0]!.toFixed(2);
    const booted = v.image ?? image;
    const { board, ready } = await bootBoard({ image: booted, machine: 'virt', snapshot: true, readyTimeoutMs: 900_000, ...(v.cpus !== undefined ? { cpus: v.cpus } : {}), ...(v.tuning ? { tuning: v.tuning } : {}) });
    const account = await guestAccount(board, booted);
    await board.stop();
    times.get(name)!.push(ready.bootMs);
    console.log(`round ${round + 1}/${rounds}  ${name.padEnd(13)} boot to API ready ${seconds(ready.bootMs)}  (load average at start ${load})  ${account}`);
  }
}

const base = times.get('default') ? median(times.get('default')!) : undefined;
console.log(`\nvirt, boot to API ready, ${rounds} round(s), QEMU's order rotated each round`);
for (const name of chosen) {
  const t = times.get(name)!;
  const ratio = base === undefined ? '' : `  ${(median(t) / base).toFixed(2)}x of default`;
  console.log(`  ${name.padEnd(13)} median ${seconds(median(t))}  (${seconds(Math.min(...t))}-${seconds(Math.max(...t))})${ratio}  ${VARIANTS[name]!.what}`);
}
