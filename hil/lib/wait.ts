/**
 * Bounded polling for state a spec waits on over the wire. Every loop has a deadline and
 * reports the last value it saw, so a timeout says where the device got stuck.
 */
export async function pollUntil<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  let last: unknown = '(nothing read)';
  while (Date.now() < deadline) {
    try {
      const value = await read();
      if (done(value)) return value;
      last = value;
    } catch (err) {
      // The device may be rebooting; keep polling until the deadline.
      last = err instanceof Error ? `error: ${err.message}` : err;
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 200));
  }
  throw new Error(`${what}: not reached within ${timeoutMs} ms; last seen ${JSON.stringify(last)?.slice(0, 1000)}`);
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
