/**
 * The `health` section of a lab file, lab-wide and per board: which checks a board must pass
 * before it is leased (and on `lab watch`'s schedule), their bounds, and when infrastructure
 * failures take a board out of the lab. Parsing is pure and names the field of a mistake.
 *
 * Checks are on when the lab file has a `health` section (`health: {}` takes every default):
 * a lab written before checks existed keeps leasing as it did.
 */
import { isMapping } from '../../src/mapping.js';

/** Every step a check may run, in the order it runs them. */
export const HEALTH_STEPS = ['ssh', 'supervisor', 'clock', 'disk', 'rootfs', 'engine', 'throttling'] as const;
export type HealthStep = (typeof HEALTH_STEPS)[number];

/** What a board's check runs and how it is bounded (lab defaults, then the board's own). */
export interface BoardHealth {
  /** The steps not run on this board (said in the result as skipped, with this reason). */
  readonly skip: readonly HealthStep[];
  /** Each step's bound: a step that has not answered by then fails, naming the bound. */
  readonly stepTimeoutMs: number;
  /** How far the board's clock may be from this host's. */
  readonly maxClockSkewMs: number;
  /** The least free space on the board's root filesystem. */
  readonly minFreeMb: number;
}

export interface LabHealth {
  /** A board whose last check is older than this is checked before it is leased. */
  readonly maxAgeMs: number;
  /** `lab watch` checks every board this often. */
  readonly everyMs: number;
  /** Infrastructure failures (a board not back after its power control) that quarantine a board ... */
  readonly infraFailures: number;
  /** ... when they happen within this window. */
  readonly infraWindowMs: number;
  /** The lab-wide step settings; each board's own are in `boardHealth`. */
  readonly defaults: BoardHealth;
}

/** Defaults fitting a Raspberry Pi on a lab bench. */
export const HEALTH_DEFAULTS = {
  maxAgeSeconds: 900,
  everySeconds: 300,
  stepTimeoutSeconds: 20,
  maxClockSkewSeconds: 10,
  minFreeMb: 500,
  infraFailures: { count: 3, windowSeconds: 3600 },
} as const;

const BOARD_KEYS = ['skip', 'stepTimeoutSeconds', 'maxClockSkewSeconds', 'minFreeMb'] as const;
const LAB_KEYS = ['maxAgeSeconds', 'everySeconds', 'infraFailures', ...BOARD_KEYS] as const;

type Fields = Record<string, unknown>;

function wholeNumber(fields: Fields, key: string, label: string, min: number, max: number, fallback: number, fail: (m: string) => never): number {
  const v = fields[key];
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) fail(`"${label}" must be a whole number from ${min} to ${max}, got ${JSON.stringify(v)}`);
  return v as number;
}

function boardFields(fields: Fields, at: string, base: BoardHealth, fail: (m: string) => never): BoardHealth {
  let skip = base.skip;
  if (fields.skip !== undefined) {
    const s = fields.skip;
    if (!Array.isArray(s) || s.some((x) => !(HEALTH_STEPS as readonly unknown[]).includes(x))) fail(`"${at}.skip" must be a list of steps from ${HEALTH_STEPS.join(', ')}, got ${JSON.stringify(s)}`);
    skip = s as HealthStep[];
  }
  return {
    skip,
    stepTimeoutMs: wholeNumber(fields, 'stepTimeoutSeconds', `${at}.stepTimeoutSeconds`, 1, 600, base.stepTimeoutMs / 1000, fail) * 1000,
    maxClockSkewMs: wholeNumber(fields, 'maxClockSkewSeconds', `${at}.maxClockSkewSeconds`, 1, 86_400, base.maxClockSkewMs / 1000, fail) * 1000,
    minFreeMb: wholeNumber(fields, 'minFreeMb', `${at}.minFreeMb`, 0, 1_000_000, base.minFreeMb, fail),
  };
}

/** The lab file's `health` section; undefined (no section) means no checks. */
export function parseLabHealth(raw: unknown, fail: (message: string) => never): LabHealth | undefined {
  if (raw === undefined) return undefined;
  // `health:` with nothing after it is YAML's null: every default.
  const h: Fields = raw === null ? {} : isMapping(raw) ? raw : fail('"health" must be a mapping (health: {} takes every default)');
  const unknown = Object.keys(h).filter((k) => !(LAB_KEYS as readonly string[]).includes(k));
  if (unknown.length) fail(`unknown field "health.${unknown[0]}" (known: ${LAB_KEYS.join(', ')})`);
  const d = HEALTH_DEFAULTS;
  let infra: Fields = {};
  if (h.infraFailures !== undefined) {
    if (!isMapping(h.infraFailures)) fail('"health.infraFailures" must be a mapping { count, windowSeconds }');
    infra = h.infraFailures as Fields;
    const bad = Object.keys(infra).filter((k) => k !== 'count' && k !== 'windowSeconds');
    if (bad.length) fail(`unknown field "health.infraFailures.${bad[0]}" (known: count, windowSeconds)`);
  }
  const base: BoardHealth = { skip: [], stepTimeoutMs: d.stepTimeoutSeconds * 1000, maxClockSkewMs: d.maxClockSkewSeconds * 1000, minFreeMb: d.minFreeMb };
  return {
    maxAgeMs: wholeNumber(h, 'maxAgeSeconds', 'health.maxAgeSeconds', 0, 604_800, d.maxAgeSeconds, fail) * 1000,
    everyMs: wholeNumber(h, 'everySeconds', 'health.everySeconds', 5, 86_400, d.everySeconds, fail) * 1000,
    infraFailures: wholeNumber(infra, 'count', 'health.infraFailures.count', 1, 1000, d.infraFailures.count, fail),
    infraWindowMs: wholeNumber(infra, 'windowSeconds', 'health.infraFailures.windowSeconds', 1, 2_592_000, d.infraFailures.windowSeconds, fail) * 1000,
    defaults: boardFields(h, 'health', base, fail),
  };
}

/** A board's own `health` (skip, bounds) over the lab's; a board may not set the lab-wide fields. */
export function parseBoardHealth(raw: unknown, at: string, lab: LabHealth | undefined, fail: (message: string) => never): BoardHealth | undefined {
  if (raw === undefined) return lab?.defaults;
  if (!lab) fail(`${at}.health: checks are on only with a lab-wide "health" section (health: {} takes every default)`);
  if (!isMapping(raw)) fail(`${at}.health must be a mapping of ${BOARD_KEYS.join(', ')}`);
  const unknown = Object.keys(raw as Fields).filter((k) => !(BOARD_KEYS as readonly string[]).includes(k));
  if (unknown.length) fail(`unknown field "${at}.health.${unknown[0]}" (known on a board: ${BOARD_KEYS.join(', ')}; the rest are lab-wide)`);
  return boardFields(raw as Fields, `${at}.health`, lab!.defaults, fail);
}
