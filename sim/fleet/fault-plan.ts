/**
 * Faults at fleet scale: `--fault partition:10%` names a scenario and the share of the fleet
 * it hits. Which devices get it is drawn from a seed over the whole fleet's indices, so a
 * rerun (or the shards of one fleet on several machines) picks the same devices.
 */
import { FleetlabError } from '../../src/errors.js';
import { seededRandom } from '../../src/seeded-random.js';

export const FAULT_KINDS = ['partition', 'disk-full', 'pull-fails', 'clock-skew'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface FaultSpec {
  readonly kind: FaultKind;
  /** Share of the fleet, 0 < percent <= 100. */
  readonly percent: number;
}

const usage = `write it as <kind>:<percent>%, e.g. partition:10%; kinds: ${FAULT_KINDS.join(', ')}`;

export function parseFault(text: string): FaultSpec {
  const match = /^([a-z-]+):([0-9]+(?:\.[0-9]+)?)%$/.exec(text.trim());
  if (!match) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--fault ${JSON.stringify(text)}: ${usage}`);
  const kind = match[1]!;
  if (!(FAULT_KINDS as readonly string[]).includes(kind)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--fault ${JSON.stringify(text)}: unknown kind ${JSON.stringify(kind)}; ${usage}`);
  const percent = Number(match[2]);
  if (!(percent > 0 && percent <= 100)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--fault ${JSON.stringify(text)}: the share must be above 0% and at most 100%`);
  return { kind: kind as FaultKind, percent };
}

const kindSalt = (kind: string) => [...kind].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0, 2166136261);

/**
 * The faults of each device index in a fleet of `devices`: for each spec, round(devices ×
 * percent) indices drawn without replacement (a partial Fisher-Yates shuffle). Devices
 * without a fault are absent from the map.
 */
export function assignFaults(devices: number, specs: readonly FaultSpec[], seed: number): Map<number, FaultKind[]> {
  const byDevice = new Map<number, FaultKind[]>();
  for (const spec of specs) {
    const count = Math.round((devices * spec.percent) / 100);
    const random = seededRandom(seed ^ kindSalt(spec.kind));
    const order = Array.from({ length: devices }, (_, i) => i);
    for (let i = 0; i < count; i++) {
      const j = i + Math.floor(random() * (devices - i));
      [order[i], order[j]] = [order[j]!, order[i]!];
      const list = byDevice.get(order[i]!) ?? [];
      if (!list.includes(spec.kind)) list.push(spec.kind);
      byDevice.set(order[i]!, list);
    }
  }
  return byDevice;
}

const HOUR_MS = 3_600_000;
/** A skewed clock is off by at least this much (less is what NTP drift looks like). */
export const MIN_SKEW_MS = HOUR_MS;
/** And at most this much: a board without a real-time clock, a month without power. */
export const MAX_SKEW_MS = 30 * 24 * HOUR_MS;

/**
 * How far a clock-skewed device's wall clock is off, from its index and the fleet's seed:
 * between one hour and thirty days, ahead or behind (a Raspberry Pi has no real-time clock;
 * it boots at the time it last saved, or at its image's build date). Whole seconds.
 */
export function clockSkewOf(index: number, seed: number): number {
  const random = seededRandom(seed ^ kindSalt('clock-skew') ^ Math.imul(index + 1, 0x9e3779b1));
  const magnitude = MIN_SKEW_MS + random() * (MAX_SKEW_MS - MIN_SKEW_MS);
  return Math.round(magnitude / 1000) * 1000 * (random() < 0.5 ? -1 : 1);
}

/** `i/n` (1-based): the device indices [from, to) this shard runs of a fleet of `devices`. */
export function shardRange(devices: number, shard: string | undefined): { from: number; to: number; label: string } {
  if (shard === undefined) return { from: 0, to: devices, label: '1/1' };
  const match = /^([1-9][0-9]*)\/([1-9][0-9]*)$/.exec(shard);
  const i = Number(match?.[1]);
  const n = Number(match?.[2]);
  if (!match || i > n) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--shard ${JSON.stringify(shard)}: write it as i/n with 1 <= i <= n, e.g. 2/4`);
  const range = { from: Math.floor((devices * (i - 1)) / n), to: Math.floor((devices * i) / n), label: `${i}/${n}` };
  if (range.to === range.from) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--shard ${shard} of ${devices} devices holds none: split a fleet into at most ${devices} shards`);
  return range;
}
