/**
 * The device going down, seen from outside: how a reboot or a cut is told apart from a device
 * that ignored it, since waiting straight for the API would find the old one still answering.
 */
import { FleetlabError } from '../../../src/errors.js';
import { until } from '../../../src/wait.js';

export interface ApiDownOptions {
  /** The target's own deadline (timeouts.ts), already fitted to the device. */
  readonly timeoutMs: number;
  readonly intervalMs: number;
  /** What the device was told, for the error: `login1 Reboot`. */
  readonly after: string;
}

/**
 * Resolves once `url/ping` stops answering 200. On src/wait.ts's `until`, not pollUntil: that
 * stretches its deadline by the spec's time scale, which the fixture sets only after a start,
 * and this deadline is the target's, stretched already.
 */
export async function waitApiDown(url: string, options: ApiDownOptions): Promise<void> {
  const answers = async (): Promise<boolean> => {
    try {
      const res = await fetch(`${url}/ping`, { signal: AbortSignal.timeout(1000) });
      await res.body?.cancel();
      return res.ok;
    } catch {
      return false;
    }
  };
  await until('the device API going down', answers, (up) => !up, {
    timeoutMs: options.timeoutMs,
    intervalMs: options.intervalMs,
    fail: () => new FleetlabError('SUP_ERR_HOST', `the device's API kept answering for ${options.timeoutMs / 1000} s after ${options.after}`),
  });
}
