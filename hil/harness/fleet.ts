/**
 * The `fleet` fixture of `fleetlab/test`: a fleet of virtual devices (sim/fleet) registered to
 * a fresh cloud of its own, for specs about rollouts rather than one device. A release for a
 * fleet names its images (`image:`); the devices' simulated engines pull them from the
 * simulated registry (fleetlab/test-app:1, :2, busybox) or from a registry on loopback.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FleetlabError } from '../../src/errors.js';
import { until } from '../../src/wait.js';
import { parseFault } from '../../sim/fleet/fault-plan.js';
import { Fleet, type FleetCounts } from '../../sim/fleet/fleet.js';
import type { StuckDevice } from '../../sim/fleet/unsettled.js';
import { startFleetCloud, type FleetCloud } from '../../sim/stack.js';
import { loadCompose, parseCompose } from '../release/compose.js';
import { publishRelease } from '../release/publish.js';
import { commitOf, type Release } from '../release/release.js';

export interface FleetOptions {
  /** How many virtual devices. */
  devices: number;
  /** `kind:percent%` each, e.g. `partition:10%`: partition, disk-full, pull-fails, clock-skew. */
  faults?: string[];
  /** Which devices get each fault (default 1). */
  seed?: number;
  /** How often each device polls its target state (default 10 s: a spec waits on it). */
  pollIntervalMs?: number;
}

export interface FleetRelease {
  /** The cloud's release id. */
  readonly id: number;
  readonly commit: string;
}

export interface ConvergeOptions {
  /** The release the devices should have applied. */
  release: FleetRelease;
  /** Milliseconds to wait at most. */
  within: number;
  /** Share of the counted devices that must have applied it (default 1: all). */
  atLeast?: number;
  /** Leave out the devices drawn for this fault (those partitioned, say). */
  except?: string;
}

export interface ConvergeResult {
  readonly pass: boolean;
  readonly message: string;
  readonly elapsedMs: number;
}

/**
 * A compose project (a file, a directory holding one, or compose text) as a release for a
 * fleet: every service names its `image:`, which the devices pull (a fleet does not build).
 */
export function fleetRelease(compose: string): Release {
  const project = /^\s*services\s*:/m.test(compose) ? parseCompose(compose, 'fleet.deploy(compose text)') : loadCompose(compose);
  const building = project.services.filter((s) => !s.image);
  if (building.length) {
    throw new FleetlabError('HIL_ERR_FLEET', `fleet.deploy: service ${building.map((s) => s.name).join(', ')} has no image: a fleet's simulated engines pull images, they do not build; name an image of the simulated registry (fleetlab/test-app:1) or push yours to a registry on loopback (fleetlab registry) and name it there`);
  }
  const images = Object.fromEntries(project.services.map((s) => [s.name, s.image!]));
  return { project, images, imageIds: {}, commit: commitOf(project, {}), pulledAsNamed: [] };
}

/** The converge wait's deadline passed: the verdict, not an error, says so. */
class NotConverged extends Error {}

export class FleetUnderTest {
  private constructor(
    private readonly fleet: Fleet,
    /** The cloud the fleet is registered to (fleet `fleet`), with its admin key. */
    readonly cloud: FleetCloud,
    private readonly dir: string,
  ) {}

  static async start(options: FleetOptions): Promise<FleetUnderTest> {
    if (!Number.isInteger(options.devices) || options.devices < 1) throw new FleetlabError('HIL_ERR_FLEET', `fleetOptions.devices must be a whole number of at least 1, got ${options.devices}`);
    const faults = (options.faults ?? []).map(parseFault);
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-hil-fleet-'));
    let cloud: FleetCloud | undefined;
    try {
      cloud = await startFleetCloud({ port: 0, dataDir: join(dir, 'cloud'), fleetName: 'fleet' });
      const fleet = await Fleet.start({
        devices: options.devices,
        cloudUrl: cloud.url,
        provisioningKey: cloud.provisioningKey,
        dataDir: join(dir, 'devices'),
        faults,
        seed: options.seed ?? 1,
        pollIntervalMs: options.pollIntervalMs ?? 10_000,
        reportIntervalMs: 2_000,
        tunnelHeartbeatMs: 5_000,
      });
      return new FleetUnderTest(fleet, cloud, dir);
    } catch (err) {
      await cloud?.close();
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
  }

  get size(): number {
    return this.fleet.devices.length;
  }

  /**
   * Publishes a compose project (a file, a directory holding one, or compose text) as the
   * fleet's release. Every service names its `image:`: a fleet pulls, it does not build.
   */
  async deploy(compose: string): Promise<FleetRelease> {
    const published = await publishRelease(fleetRelease(compose), { url: this.cloud.url, apiKey: this.cloud.adminKey, fleet: 'fleet' });
    return { id: published.releaseId, commit: published.commit };
  }

  counts(): FleetCounts {
    return this.fleet.counts();
  }

  /** Devices that have not applied `release` (all when none is given), with why. */
  stuck(release?: FleetRelease, limit = 20): StuckDevice[] {
    return this.fleet.stuck(release?.id ?? null, limit);
  }

  /** Cuts the devices drawn for `partition` from the cloud. */
  partition(): void {
    this.fleet.partition();
  }

  heal(): void {
    this.fleet.heal();
  }

  /** Each device's volumes with when they were created: a volume made again has a new time. */
  volumes(): Map<number, Array<{ name: string; createdAt: string }>> {
    return new Map(this.fleet.devices.map((d) => [d.index, d.volumes().map(({ name, createdAt }) => ({ name, createdAt }))]));
  }

  /** Waits until the devices have applied a release; the verdict says how many did and why the others did not. */
  async converge(options: ConvergeOptions): Promise<ConvergeResult> {
    const atLeast = options.atLeast ?? 1;
    const counted = this.fleet.devices.filter((d) => !options.except || !d.faults.includes(options.except as never));
    const t0 = Date.now();
    let applied = 0;
    const count = async () => ({ applied: (applied = this.fleet.appliedOn(options.release.id, counted)), elapsedMs: Date.now() - t0 });
    // A fleet that does not converge in time is a verdict (below), not an error.
    const reached = await until(`release ${options.release.id} on the fleet`, count, (c) => c.applied >= Math.ceil(atLeast * counted.length), {
      timeoutMs: options.within,
      intervalMs: 500,
      stopOn: () => true,
      fail: (f) => (f.end === 'timeout' ? new NotConverged() : undefined),
    }).catch((err: unknown) => {
      if (err instanceof NotConverged) return undefined;
      throw err;
    });
    if (reached) {
      return { pass: true, elapsedMs: reached.elapsedMs, message: `${reached.applied} of ${counted.length} devices applied release ${options.release.id} in ${(reached.elapsedMs / 1000).toFixed(1)} s` };
    }
    const stuck = this.stuck(options.release, 5)
      .filter((s) => !options.except || !s.faults.includes(options.except as never))
      .map((s) => `  device ${s.index}${s.faults.length ? ` (${s.faults.join(', ')})` : ''}: ${s.phase}, ${s.reason}`);
    return {
      pass: false,
      elapsedMs: Date.now() - t0,
      message: [`${applied} of ${counted.length} devices${options.except ? ` (without ${options.except})` : ''} applied release ${options.release.id} within ${options.within / 1000} s; wanted ${Math.round(atLeast * 100)}%`, `now: ${JSON.stringify(this.counts())}`, 'stuck, for example:', ...stuck].join('\n'),
    };
  }

  async dispose(): Promise<void> {
    try {
      await this.fleet.close();
      await this.cloud.close();
    } finally {
      if (existsSync(this.dir)) await rm(this.dir, { recursive: true, force: true });
    }
  }
}
