/**
 * Runs `stop` once, on the first SIGINT or SIGTERM (or when `also` is called), and resolves
 * when it has finished. Long-running commands use it to shut down cleanly.
 */
export function untilStopped(stop: () => Promise<void>): { done: Promise<void>; trigger: () => void } {
  let trigger: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    let called = false;
    trigger = () => {
      if (called) return;
      called = true;
      process.off('SIGINT', trigger);
      process.off('SIGTERM', trigger);
      void stop().finally(resolve);
    };
    process.on('SIGINT', trigger);
    process.on('SIGTERM', trigger);
  });
  return { done, trigger };
}
