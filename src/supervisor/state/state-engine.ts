/**
 * Drives the engine to the target state: plans a round, applies it, reads the engine again,
 * until a round is empty. One apply at a time; triggers during an apply coalesce into one
 * more. App actions (restart, purge, stop...) run through `exclusive` so they never
 * interleave with an apply.
 */
import type { CheckedTarget } from '../../protocol/checked-target.js';
import { FleetlabError, errorText, isFleetlabError } from '../../errors.js';
import type { Engine, EngineSnapshot, SupervisorNetworkState } from '../adapters/engine.js';
import { desiredContainer, specInputs, type DesiredContainer, type SpecContext } from './container-spec.js';
import { ImagePulls, type PullFailure } from './image-pulls.js';
import type { UpdateLocks } from './locks.js';
import { describeStep, plan, serviceKey, type Step } from './planner.js';
import type { ServiceStatus } from '../../protocol/device-api.js';
import { deviceView, type DeviceView } from './status.js';

export interface Logger {
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
}

export interface StateEngineDeps {
  engine: Engine;
  locks: UpdateLocks;
  log: Logger;
  /** The context but the supervisor network, which the state engine reads from the engine. */
  specContext: () => Omit<SpecContext, 'supervisorNetwork'>;
  /** Each time a round's read finds the supervisor network usable; awaited, so the API listens at its address there before a service that calls it there starts. */
  supervisorNetworkSeen?: (network: SupervisorNetworkState) => Promise<void>;
  /** Pause before retrying after a failed or lock-blocked round. */
  retryDelayMs?: (attempt: number) => number;
  /** Pause before planning again while services wait for a dependency's health (default 1 s). */
  healthWaitMs?: number;
  /** A normal update removes volumes no target declares, as supervisors before 10.0 did (default: kept until cleanup-volumes). */
  removeUnreferencedVolumes?: boolean;
}

const MAX_ROUNDS = 30;

/** A FIFO mutex: callers run one at a time in call order. */
class Serial {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.tail.then(fn, fn);
    this.tail = result.catch(() => undefined);
    return result;
  }
}

export class StateEngine {
  /** Checked where it entered the device; its settings (override lock) are read from it, not parsed again. */
  private target: CheckedTarget;
  private readonly serial = new Serial();
  private readonly pulls: ImagePulls;
  private readonly transient = new Map<string, ServiceStatus>();
  private readonly userStopped = new Set<string>();
  private applying = false;
  /** What the apply in flight is doing now, for `activity()`. */
  private step = 'starting';
  private pending: { force: boolean } | null = null;
  /** Ids of the containers found exited by this supervisor's first engine read, not started since: see PlanInput.startExited. */
  private exitedAtStart: Set<string> | null = null;
  private retryTimer: NodeJS.Timeout | undefined;
  private attempts = 0;
  private waiters: Array<() => void> = [];
  private closed = false;
  /** Writes (app actions, apply rounds) finished so far: readers share an engine read only within one count. */
  private writes = 0;
  private viewRead: { writes: number; read: Promise<EngineSnapshot> } | null = null;
  lastError: string | null = null;
  private roundFailed = false;
  updateLocked = false;
  /** Why the last round waited on health (logged when it changes), or null. */
  private waitingFor: string | null = null;
  private desiredMemo: { target: CheckedTarget; inputs: string; desired: ReadonlyMap<string, DesiredContainer> } | null = null;
  /** As the last engine read found it, when usable: labelled services' address and attachment follow from it. */
  private supervisorNetwork: SpecContext['supervisorNetwork'];

  constructor(private readonly deps: StateEngineDeps, initialTarget: CheckedTarget) {
    this.target = initialTarget;
    this.pulls = new ImagePulls({ pull: (image, onProgress) => deps.engine.pull(image, onProgress), log: deps.log });
  }

  /** The last attempt to apply failed, or an image of the target failed to download and waits for its retry. */
  get updateFailed(): boolean {
    return this.roundFailed || this.pulls.failures.size > 0;
  }

  /** Why the device is not at its target, in one line: the failed round, else a failed download. */
  get problem(): string | null {
    if (this.lastError) return this.lastError;
    const failure = this.pulls.failures.values().next().value;
    return failure ? `pull of ${failure.image} failed: ${failure.error}` : null;
  }

  getTarget(): CheckedTarget {
    return this.target;
  }

  setTarget(target: CheckedTarget): void {
    this.target = target;
    this.attempts = 0;
    this.trigger();
  }

  /** Asks for an apply; coalesces with one already running. */
  trigger(options: { force?: boolean } = {}): void {
    if (this.closed) return;
    const force = options.force ?? false;
    this.pending = { force: (this.pending?.force ?? false) || force };
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = undefined;
    }
    if (!this.applying) void this.drain();
  }

  /** Resolves once no apply is running or pending (retries scheduled after a failure count as settled). */
  settled(): Promise<void> {
    if (!this.applying && !this.pending) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  isApplying(): boolean {
    return this.applying || this.pending !== null || this.retryTimer !== undefined;
  }

  /** What an unfinished apply is doing or waiting for, in one line (a fleet says why a device has not settled). */
  activity(): string {
    if (this.applying) return `applying: ${this.step}${this.pulls.inFlight.size > 0 ? `, ${this.pulls.inFlight.size} image(s) downloading` : ''}`;
    if (this.pending) return 'an apply is queued';
    if (this.updateLocked) return 'waiting for an update lock';
    if (this.waitingFor) return `waiting: ${this.waitingFor}`;
    if (this.retryTimer) return `retrying (attempt ${this.attempts}) after: ${this.problem ?? 'a failed round'}`;
    return 'settled';
  }

  /** Runs an app action with no apply interleaving. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return this.write(fn);
  }

  /** One at a time, counted when it ends, before its caller goes on. */
  private write<T>(fn: () => Promise<T>): Promise<T> {
    return this.serial.run(fn).finally(() => {
      this.writes++;
    });
  }

  markUserStopped(containerId: string, stopped: boolean): void {
    if (stopped) this.userStopped.add(containerId);
    else this.userStopped.delete(containerId);
  }

  setTransient(appId: number, serviceName: string, status: ServiceStatus | undefined): void {
    const key = serviceKey(appId, serviceName);
    if (status) this.transient.set(key, status);
    else this.transient.delete(key);
  }

  /**
   * The containers the target asks for, built again only when the target or what the
   * context lends them (names, address, app keys) changed: every API read and every apply
   * round asks for them, and building them is most of what a read costs.
   */
  desired(): ReadonlyMap<string, DesiredContainer> {
    const ctx: SpecContext = { ...this.deps.specContext(), ...(this.supervisorNetwork ? { supervisorNetwork: this.supervisorNetwork } : {}) };
    const inputs = specInputs(ctx, this.target);
    if (this.desiredMemo?.target === this.target && this.desiredMemo.inputs === inputs) return this.desiredMemo.desired;
    const map = new Map<string, DesiredContainer>();
    for (const app of this.target.apps) {
      for (const service of app.services) map.set(serviceKey(app.appId, service.serviceName), desiredContainer(app, service, ctx));
    }
    this.desiredMemo = { target: this.target, inputs, desired: map };
    return map;
  }

  /**
   * The device as the API reports it. Concurrent readers share one engine read: a view may
   * be a few ms older than the request, which is fine for reporting; the applier never uses
   * a shared read, as planning on stale state would repeat steps. A read that began before a
   * write ended is not shared after it: a client that started a service and then asks must see
   * it started, whoever else was reading (a dashboard's poll, the HIL timeline's once a second
   * made the v1 start spec read "Exited" one run in two).
   */
  async view(): Promise<DeviceView> {
    if (this.viewRead?.writes !== this.writes) {
      const entry = { writes: this.writes, read: this.deps.engine.snapshot() };
      this.viewRead = entry;
      entry.read.then(
        () => this.viewRead === entry && (this.viewRead = null),
        () => this.viewRead === entry && (this.viewRead = null),
      );
    }
    return this.viewOf(await this.viewRead!.read);
  }

  viewOf(current: EngineSnapshot): DeviceView {
    return deviceView({
      target: this.target,
      current,
      desired: this.desired(),
      fetches: this.pulls.inFlight,
      pullFailures: this.pulls.failures,
      transient: this.transient,
      userStopped: this.userStopped,
      applying: this.isApplying(),
    });
  }

  /** Only apply rounds' reads count: a view read may be older than the round's change. */
  private async observe(current: EngineSnapshot): Promise<void> {
    const found = current.supervisorNetwork;
    this.supervisorNetwork = found?.usable ? { name: found.name, subnet: found.subnet, gateway: found.gateway, apiHost: found.apiHost } : undefined;
    if (found?.usable) await this.deps.supervisorNetworkSeen?.(found);
  }

  /** Stops applying; `settled()` then resolves once the round in flight has finished. */
  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.pending = null;
  }

  private async drain(): Promise<void> {
    this.applying = true;
    try {
      while (this.pending && !this.closed) {
        const { force } = this.pending;
        this.pending = null;
        await this.write(() => this.applyOnce(force));
      }
    } finally {
      this.applying = false;
      for (const w of this.waiters.splice(0)) w();
    }
  }

  private scheduleRetry(force: boolean): void {
    if (this.closed) return;
    this.attempts += 1;
    const delay = this.deps.retryDelayMs?.(this.attempts) ?? Math.min(30_000, 500 * 2 ** Math.min(this.attempts, 6));
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.trigger({ force });
    }, delay);
    this.retryTimer.unref();
  }

  private async applyOnce(force: boolean): Promise<void> {
    for (let round = 0; round < MAX_ROUNDS; round++) {
      if (this.closed) return;
      let steps: Step[];
      try {
        this.step = 'reading the engine';
        const current = await this.deps.engine.snapshot();
        await this.observe(current);
        this.exitedAtStart ??= new Set(current.containers.filter((c) => c.state === 'exited').map((c) => c.id));
        steps = plan({ target: this.target, current, desired: this.desired(), startExited: this.exitedAtStart, removeUnreferencedVolumes: this.deps.removeUnreferencedVolumes ?? false });
        this.pulls.keepOnly(steps.filter((s) => s.action === 'fetch'));
      } catch (err) {
        return this.fail(err, force);
      }
      if (steps.length === 0) {
        this.exitedAtStart?.clear();
        this.roundFailed = false;
        this.updateLocked = false;
        this.lastError = null;
        this.attempts = 0;
        this.waitingFor = null;
        return;
      }
      if (steps.every((s) => s.action === 'wait')) return this.waitForHealth(steps, force);
      let progressed: boolean;
      try {
        progressed = await this.applyRound(steps, force || this.target.settings.overrideLock);
      } catch (err) {
        return this.fail(err, force);
      }
      if (!progressed) {
        // Only lock-blocked steps were left: wait for the lock to go away.
        this.updateLocked = true;
        this.scheduleRetry(force);
        return;
      }
    }
    this.fail(new Error(`target state not reached after ${MAX_ROUNDS} rounds`), force);
  }

  /**
   * Only health holds services back: plan again shortly, as the engine's healthcheck (not this
   * supervisor) decides when that changes. Not a failure: the attempt count stays where it is.
   */
  private waitForHealth(steps: Step[], force: boolean): void {
    const reasons = steps.map((s) => (s.action === 'wait' ? s.reason : '')).join('; ');
    if (reasons !== this.waitingFor) this.deps.log.info(reasons);
    this.waitingFor = reasons;
    if (this.closed) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.trigger({ force });
    }, this.deps.healthWaitMs ?? 1_000);
    this.retryTimer.unref();
  }

  private fail(err: unknown, force: boolean): void {
    this.roundFailed = true;
    this.lastError = errorText(err);
    this.deps.log.error(`apply failed: ${this.lastError}`);
    this.scheduleRetry(force);
  }

  /** Runs one round; false when every step was held back by an update lock. */
  private async applyRound(steps: Step[], ignoreLocks: boolean): Promise<boolean> {
    const { engine, locks, log } = this.deps;
    let progressed = false;
    const fetches = steps.filter((s): s is Extract<Step, { action: 'fetch' }> => s.action === 'fetch');
    // Never rejects: a step below that throws leaves the pulls running for the next round to join.
    const pulling = this.pulls.run(fetches);

    for (const step of steps) {
      this.step = describeStep(step);
      switch (step.action) {
        case 'createSupervisorNetwork':
          await engine.createSupervisorNetwork();
          progressed = true;
          break;
        case 'createNetwork':
          await engine.createNetwork(step.appId, step.network);
          progressed = true;
          break;
        case 'createVolume':
          await engine.createVolume(step.appId, step.volume);
          progressed = true;
          break;
        case 'start':
          // The lock root is on tmpfs: after a reboot the engine would make a missing lock
          // directory itself, root's and 0755, where a service that runs as another user cannot
          // take its lock.
          locks.ensureDir(step.appId, step.container.serviceName);
          await this.withStatus(step.appId, step.container.serviceName, 'Starting', () => engine.start(step.container.id));
          this.exitedAtStart?.delete(step.container.id);
          progressed = true;
          break;
        case 'removeVolume':
          // Planned only once no container of the app can hold it: one in use is held by a
          // container fleetlab does not manage, which the failed round names.
          if (!(await engine.removeVolume(step.volume.name))) throw new FleetlabError('SUP_ERR_ENGINE', `volume ${step.volume.name} is declared by no target but is still in use by a container`);
          log.info(`Removed unreferenced volume ${step.volume.name}`);
          progressed = true;
          break;
        case 'removeNetwork':
          await engine.removeNetwork(step.network.id);
          locks.forgetApp(step.appId);
          progressed = true;
          break;
        default:
          break;
      }
    }

    type ContainerChange = Extract<Step, { action: 'removeContainer' | 'stop' }>;
    const changes = steps.filter((s): s is ContainerChange => s.action === 'removeContainer' || s.action === 'stop');
    const byApp = new Map<number, ContainerChange[]>();
    for (const s of changes) byApp.set(s.appId, [...(byApp.get(s.appId) ?? []), s]);
    for (const [appId, appSteps] of byApp) {
      const names = [...new Set(appSteps.map((s) => s.container.serviceName))];
      let held;
      try {
        held = locks.acquire(appId, names, ignoreLocks);
      } catch (err) {
        if (isFleetlabError(err) && err.code === 'SUP_ERR_LOCKED') {
          if (!this.updateLocked) log.warn(`Updates are locked for app ${appId}, retrying: ${err.message}`);
          this.updateLocked = true;
          continue;
        }
        throw err;
      }
      try {
        for (const s of appSteps) {
          if (s.action === 'removeContainer') {
            log.info(`Removing ${s.container.serviceName} (${s.reason})`);
            await this.withStatus(appId, s.container.serviceName, 'Stopping', async () => {
              await engine.stop(s.container.id);
              await engine.remove(s.container.id);
            });
            this.userStopped.delete(s.container.id);
          } else {
            await this.withStatus(appId, s.container.serviceName, 'Stopping', () => engine.stop(s.container.id));
          }
          progressed = true;
        }
      } finally {
        held.release();
      }
    }

    // Side by side, as balena's supervisor does: the planner puts a service in a round only once
    // what it depends on has started, so one round's containers never wait for each other. Every
    // one is settled before the round ends, so a failed one cannot leave another still being made
    // while the next round plans.
    const creates = steps.filter((s): s is Extract<Step, { action: 'createContainer' }> => s.action === 'createContainer');
    if (creates.length > 0) this.step = `creating ${creates.map((c) => c.desired.service.serviceName).join(', ')}`;
    const created = await Promise.allSettled(
      creates.map(async (step) => {
        const { desired } = step;
        const name = desired.service.serviceName;
        locks.ensureDir(step.appId, name);
        await this.withStatus(step.appId, name, 'Installing', async () => {
          log.info(`Installing ${name} of app ${step.appId} (release ${desired.spec.labels['io.fleetlab.release-id']})`);
          const id = await engine.createContainer(desired.spec);
          if (desired.service.running) {
            this.setTransient(step.appId, name, 'Starting');
            await engine.start(id);
          }
        });
      }),
    );
    const createFailed = created.find((c): c is PromiseRejectedResult => c.status === 'rejected');
    if (createFailed) throw createFailed.reason;
    if (creates.length > 0) progressed = true;

    if (fetches.length > 0) this.step = 'waiting for downloads';
    const failed = await pulling;
    if (failed.length > 0) throw pullsFailed(failed);
    return progressed || fetches.length > 0;
  }

  private async withStatus(appId: number, serviceName: string, status: ServiceStatus, fn: () => Promise<void>): Promise<void> {
    this.setTransient(appId, serviceName, status);
    try {
      await fn();
    } finally {
      this.setTransient(appId, serviceName, undefined);
    }
  }
}

function pullsFailed(failed: PullFailure[]): FleetlabError {
  const what = failed.map((f) => `${f.image} (service ${f.serviceName} of app ${f.appId}): ${f.error}`).join('; ');
  return new FleetlabError('SUP_ERR_ENGINE', `could not download ${what}`);
}
