/**
 * The imperative actions of the device API (stop, start, restart, purge, stop-all before a
 * reboot). Each takes the update locks of the services it touches (force overrides), runs
 * exclusively of the state engine, and leaves recreation to the state engine. An action on
 * one app is done for a caller (`who`): a key scoped to another app is refused here, where
 * the app is looked up.
 */
import { badRequest, notFound } from '../../errors.js';
import type { TargetApp, TargetService } from '../../protocol/target-state.js';
import type { Engine, ManagedContainer } from '../adapters/engine.js';
import type { Identity } from './keys.js';
import type { HeldLocks, UpdateLocks } from './locks.js';
import { requireInScope } from './scope.js';
import type { Logger, StateEngine } from './state-engine.js';

export interface ServiceSelector {
  serviceName?: string;
  imageId?: number;
}

export class AppActions {
  constructor(private readonly deps: { state: StateEngine; engine: Engine; locks: UpdateLocks; log: Logger }) {}

  /** 401 outside the caller's scope, checked first so a scoped key cannot probe other ids. */
  app(appId: number, who: Identity): TargetApp {
    requireInScope(who, appId);
    const app = this.deps.state.getTarget().apps.find((a) => a.appId === appId);
    if (!app) throw notFound(`App ${appId} is not on this device`);
    return app;
  }

  /** docs/decisions.md item 6: both given must name the same service. */
  service(app: TargetApp, selector: ServiceSelector): TargetService {
    const { serviceName, imageId } = selector;
    if (serviceName === undefined && imageId === undefined) throw badRequest('body must have serviceName or imageId');
    const byName = serviceName !== undefined ? app.services.find((s) => s.serviceName === serviceName) : undefined;
    const byImage = imageId !== undefined ? app.services.find((s) => s.imageId === imageId) : undefined;
    if (serviceName !== undefined && !byName) throw notFound(`Service "${serviceName}" is not in app ${app.appId}`);
    if (imageId !== undefined && !byImage) throw notFound(`No service with imageId ${imageId} in app ${app.appId}`);
    if (byName && byImage && byName !== byImage) {
      throw badRequest(`serviceName "${serviceName}" and imageId ${imageId} name different services`);
    }
    return (byName ?? byImage)!;
  }

  async containers(appId: number, serviceName?: string): Promise<ManagedContainer[]> {
    const snapshot = await this.deps.engine.snapshot();
    return snapshot.containers.filter((c) => c.appId === appId && (serviceName === undefined || c.serviceName === serviceName));
  }

  private async underLocks<T>(appId: number, services: string[], force: boolean, fn: () => Promise<T>): Promise<T> {
    return this.deps.state.exclusive(async () => {
      const held = this.deps.locks.acquire(appId, services, force);
      try {
        return await fn();
      } finally {
        held.release();
      }
    });
  }

  private async removeAndRecreate(appId: number, services: string[], force: boolean, between?: () => Promise<void>): Promise<void> {
    await this.underLocks(appId, services, force, async () => {
      for (const c of await this.containers(appId)) {
        if (!services.includes(c.serviceName)) continue;
        this.deps.state.setTransient(appId, c.serviceName, 'Stopping');
        try {
          await this.deps.engine.stop(c.id);
          await this.deps.engine.remove(c.id);
        } finally {
          this.deps.state.setTransient(appId, c.serviceName, undefined);
        }
        this.deps.state.markUserStopped(c.id, false);
      }
      await between?.();
    });
    this.deps.state.trigger();
    await this.deps.state.settled();
  }

  async restartService(who: Identity, appId: number, selector: ServiceSelector, force: boolean): Promise<void> {
    const service = this.service(this.app(appId, who), selector);
    this.deps.log.info(`Restarting service ${service.serviceName} of app ${appId}`);
    await this.removeAndRecreate(appId, [service.serviceName], force);
  }

  async restartApp(who: Identity, appId: number, force: boolean): Promise<void> {
    const app = this.app(appId, who);
    this.deps.log.info(`Restarting app ${appId}`);
    await this.removeAndRecreate(appId, app.services.map((s) => s.serviceName), force);
  }

  /** Clears the app's named volumes (its /data) and recreates every container. */
  async purge(who: Identity, appId: number, force: boolean): Promise<void> {
    const app = this.app(appId, who);
    this.deps.log.info(`Purging data of app ${appId}`);
    await this.removeAndRecreate(appId, app.services.map((s) => s.serviceName), force, async () => {
      const snapshot = await this.deps.engine.snapshot();
      for (const v of snapshot.volumes.filter((v) => v.appId === appId)) await this.deps.engine.removeVolume(v.name);
    });
  }

  /** Stops the service's container, keeping it; returns its id ('' when it has none). */
  async stopService(who: Identity, appId: number, selector: ServiceSelector, force: boolean): Promise<string> {
    const service = this.service(this.app(appId, who), selector);
    return this.underLocks(appId, [service.serviceName], force, async () => {
      const [container] = await this.containers(appId, service.serviceName);
      if (!container) return '';
      this.deps.state.setTransient(appId, service.serviceName, 'Stopping');
      try {
        await this.deps.engine.stop(container.id);
      } finally {
        this.deps.state.setTransient(appId, service.serviceName, undefined);
      }
      this.deps.state.markUserStopped(container.id, true);
      return container.id;
    });
  }

  /** Starts the service's container; start does not respect locks (docs/decisions.md item 7). */
  async startService(who: Identity, appId: number, selector: ServiceSelector): Promise<string> {
    const service = this.service(this.app(appId, who), selector);
    const started = await this.deps.state.exclusive(async () => {
      const [container] = await this.containers(appId, service.serviceName);
      if (!container) return '';
      this.deps.state.markUserStopped(container.id, false);
      await this.deps.engine.start(container.id);
      return container.id;
    });
    if (started) return started;
    // No container yet: let the state engine create it.
    this.deps.state.trigger();
    await this.deps.state.settled();
    return (await this.containers(appId, service.serviceName))[0]?.id ?? '';
  }

  /** Before a reboot or shutdown: stop every service, under all their locks. */
  async stopAll(force: boolean): Promise<void> {
    const apps = this.deps.state.getTarget().apps;
    await this.deps.state.exclusive(async () => {
      const held: HeldLocks[] = [];
      try {
        for (const a of apps) held.push(this.deps.locks.acquire(a.appId, a.services.map((s) => s.serviceName), force));
        const snapshot = await this.deps.engine.snapshot();
        await Promise.all(snapshot.containers.map((c) => this.deps.engine.stop(c.id)));
      } finally {
        for (const h of held) h.release();
      }
    });
  }

  /** Throws 423 when an app holds the lock of any of the device's services and force is not set. */
  checkLocks(force: boolean): void {
    if (force) return;
    for (const app of this.deps.state.getTarget().apps) {
      this.deps.locks.refuseIfAppLocked(app.appId, app.services.map((s) => s.serviceName));
    }
  }
}
