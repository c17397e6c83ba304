/** RSS sampled every so many calls during the supervisor bench's long run. */
export interface RssCheckpoint {
  calls: number;
  rssMiB: number;
}

/**
 * RSS after `at` calls against where it settles (the run's end), each as the mean of the
 * checkpoints in the `span` calls up to it. Under load RSS saws between collections (~91 to
 * ~98 MiB, a tooth every ~40,000 calls), and two single samples can land on opposite teeth:
 * the same run read +4.5% from its samples at 100k and 200k, +2.6% from these means.
 */
export function rssDrift(checkpoints: readonly RssCheckpoint[], at: number, span: number): { drift: number; single: number; comparedAt: number; lastCalls: number } {
  if (checkpoints.length === 0) throw new Error('rssDrift: no checkpoints');
  const compared = checkpoints.find((c) => c.calls >= at) ?? checkpoints[0]!;
  const last = checkpoints.at(-1)!;
  const meanUpTo = (end: number) => {
    const window = checkpoints.filter((c) => c.calls <= end && c.calls > end - span);
    return window.reduce((sum, c) => sum + c.rssMiB, 0) / window.length;
  };
  return {
    drift: meanUpTo(compared.calls) / meanUpTo(last.calls) - 1,
    single: compared.rssMiB / last.rssMiB - 1,
    comparedAt: compared.calls,
    lastCalls: last.calls,
  };
}
