/**
 * How large a fleet worker's heap may grow. V8 grows the heap ahead of what is live by a factor
 * of up to 4 where the heap limit is 2 GB or more (any machine with 16 GB of memory), and a
 * process keeps the resident pages of its highest heap: 5,000 devices in one process held about
 * 300 MB live but peaked near 970 MB during a rollout. Under a 2 GB limit V8 scales that factor
 * down toward 1.3 (heap-controller.cc, MaxGrowingFactor), so a worker gets a limit sized to its
 * devices: more than twice what they hold live, and small enough to keep the growth near 1.5.
 * Measured at 5,000 devices in one process (bench:fleet): peak RSS 969 MB without a limit,
 * 661-696 MB with 756-1,024 MB, the rollout as fast (72 s). A fleet in this very process
 * (`--workers 1`, the fixture) keeps Node's default limit.
 */

/** The process itself: modules, the cloud client's code, the journal. */
const BASE_MB = 256;
/** One device's live heap is about 0.06 MB (supervisor, engine, store); room for a rollout's garbage. */
const MB_PER_DEVICE = 0.1;

/** The old-space limit, in MB, for a process running this many devices. */
export function heapLimitMb(devices: number): number {
  return Math.ceil(BASE_MB + Math.max(0, devices) * MB_PER_DEVICE);
}

/**
 * A semi-space of young objects, in MB: Node 20 and 22's default on 64 bits. Node 24's V8 lets
 * it grow to 64 MB (the young generation to 192 MB) in a process of any heap limit, which
 * would add up to 144 MB to each worker; pinned, the budget is the same on every Node.
 */
const SEMI_SPACE_MB = 16;

/** The Node options that set it, for a worker's execArgv. */
export function heapLimitFlags(devices: number): string[] {
  return [`--max-old-space-size=${heapLimitMb(devices)}`, `--max-semi-space-size=${SEMI_SPACE_MB}`];
}
