/**
 * Figures for the HIL `container` target: a cold image build (every layer rebuilt, debootstrap
 * included), a cached rebuild (nothing changed: tags are only inspected), and the target's
 * start-to-ready time (container start until the device API answers /ping), then its
 * power-cycle time. Prints them; asserts nothing.
 *
 *   npx tsx bench/container-target.bench.ts [--skip-cold] [--starts N]
 */
import { buildDeviceImage, type DeviceImage } from '../device-image/container-sim/build.js';
import { fleetlabRoot } from '../src/package-root.js';
import { containerTarget } from '../hil/targets/container.js';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

function describe(label: string, image: DeviceImage): string {
  const built = [image.builtBase && 'base', image.builtDeps && 'deps', image.builtApp && 'app'].filter(Boolean).join('+') || 'nothing';
  return `${label}: ${s(image.totalMs)} (built ${built}; base ${s(image.baseMs)}, deps ${s(image.depsMs)}, app ${s(image.appMs)})`;
}

async function main(): Promise<void> {
  const repoRoot = fleetlabRoot(import.meta.url);
  const starts = Number(arg('--starts') ?? 3);
  const lines: string[] = [];
  const print = (line: string) => {
    lines.push(line);
    console.log(line);
  };

  if (!process.argv.includes('--skip-cold')) {
    const cold = await buildDeviceImage({ repoRoot, force: true, progress: (e) => console.error(`  [${s(e.elapsedMs)}] ${e.stage}: ${e.detail}`) });
    print(describe('cold image build', cold));
  }
  const warm = await buildDeviceImage({ repoRoot });
  print(describe('first build after (sources may have moved)', warm));
  const cached = await buildDeviceImage({ repoRoot });
  print(describe('cached rebuild', cached));
  process.env.FLEETLAB_DEVICE_IMAGE = cached.ref;

  const { default: Docker } = await import('dockerode');
  const info = await new Docker({ socketPath: '/var/run/docker.sock' }).getImage(cached.ref).inspect();
  print(`image ${cached.ref}: ${(info.Size / 1e6).toFixed(0)} MB`);

  const readyMs: number[] = [];
  for (let i = 0; i < starts; i++) {
    const t = Date.now();
    const dut = await containerTarget.start({ image: cached.ref });
    readyMs.push(Date.now() - t);
    if (i === starts - 1) {
      const c = Date.now();
      await dut.power!.cycle();
      print(`power cycle (kill, start, ready line, /ping): ${s(Date.now() - c)}`);
      const r = Date.now();
      await dut.power!.reboot();
      print(`reboot through login1 until /ping answers again: ${s(Date.now() - r)}`);
    }
    await dut.close();
  }
  const sorted = [...readyMs].sort((a, b) => a - b);
  print(`container target start-to-ready (${starts} starts): median ${s(sorted[Math.floor(sorted.length / 2)]!)}, min ${s(sorted[0]!)}, max ${s(sorted.at(-1)!)}`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
