/**
 * The base image: a minimal Debian root filesystem with the tools the sim runs and this
 * host's Node, made by debootstrap and imported through the Engine API (no registry is
 * reachable to pull one from).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import { execa } from 'execa';
import { FleetlabError } from '../../src/errors.js';
import { streamDone } from '../../src/engine-client/engine-stream.js';
import { TRIM_PATHS } from '../recipe.js';
import { needTool } from '../tools.js';
import { BASE_PACKAGES, buildTools } from './plan.js';

export async function buildBase(
  docker: Docker,
  o: { baseRef: string; suite: string; mirror: string; nodeBinary: string; workDir: string; report: (stage: string, detail: string) => void },
): Promise<void> {
  const debootstrap = needTool(buildTools.debootstrap);
  const tar = needTool(buildTools.tar);
  if (process.getuid?.() !== 0) {
    throw new FleetlabError('HIL_ERR_PERMISSION', `building ${o.baseRef} runs debootstrap, which needs root: run it once as root (sudo "$(command -v node)" node_modules/fleetlab/bin/fleetlab.js test-images device-sim: not npx under sudo, which leaves root's files in your npm cache), and later runs, as any user in the docker group, reuse the image`);
  }
  const dir = await mkdtemp(join(o.workDir, 'fleetlab-device-base-'));
  const rootfs = join(dir, 'rootfs');
  try {
    o.report('base', `debootstrap --variant=minbase ${o.suite} from ${o.mirror} (${BASE_PACKAGES.join(', ')})`);
    const run = execa(debootstrap, ['--variant=minbase', `--include=${BASE_PACKAGES.join(',')}`, o.suite, rootfs, o.mirror], { all: true, reject: false });
    const phases = new Set<string>();
    let tail: string[] = [];
    run.all?.on('data', (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (!line.trim()) continue;
        tail = [...tail.slice(-19), line];
        const verb = /^I: (\w+)/.exec(line)?.[1];
        // One line per phase: Retrieving/Validating alternate for every package.
        if (verb && !phases.has(verb)) {
          phases.add(verb);
          o.report('base', `debootstrap: ${line.slice(3)}`);
        }
      }
    });
    const result = await run;
    if (result.exitCode !== 0) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `debootstrap failed (exit ${result.exitCode}); its last lines:\n${tail.join('\n')}\n(log: ${join(rootfs, 'debootstrap/debootstrap.log')})`);
    }
    for (const p of TRIM_PATHS) await rm(join(rootfs, p), { recursive: true, force: true });
    await execa('install', ['-m', '0755', o.nodeBinary, join(rootfs, 'usr/local/bin/node')]);
    // The host's Node must run on the image's libraries: prove it before the import.
    const version = await execa('chroot', [rootfs, '/usr/local/bin/node', '--version'], { reject: false });
    if (version.exitCode !== 0) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `${o.nodeBinary} does not run in the ${o.suite} root filesystem: ${version.stderr || version.stdout}`);
    }
    o.report('base', `node ${version.stdout.trim()} runs in the root filesystem; importing into the engine`);
    const [repo, tag] = o.baseRef.split(':') as [string, string];
    const tarball = execa(tar, ['-C', rootfs, '--numeric-owner', '--exclude=./dev/*', '--exclude=./proc/*', '--exclude=./sys/*', '-cf', '-', '.'], { buffer: false });
    const stream = await docker.importImage(tarball.stdout!, {
      repo,
      tag,
      changes: ['ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'WORKDIR /', 'CMD ["/bin/bash"]'],
    });
    await streamDone(docker, stream, { what: `importing ${o.baseRef}` });
    await tarball;
    o.report('base', `${o.baseRef} imported`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
