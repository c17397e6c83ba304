/**
 * The lab file (`fleetlab.lab.yaml`): the boards a lab shares between test runs, and where
 * their leases are kept. Each board is a name, tags to pick it by, an optional serial
 * console, and the `board` target's own config fields (hil/lab/board-config.ts: host,
 * privateKey, power, led, ...), so a board in a lab is described once, the same way.
 * Parsing is pure and names the board and field of every mistake.
 */
import { dirname, isAbsolute, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { FleetlabError, errorText } from '../../src/errors.js';
import { parseBoardConfig, type BoardConfig } from './board-config.js';
import { parseBoardHealth, parseLabHealth, type BoardHealth, type LabHealth } from './health-config.js';
import { parseFlakes, type FlakeSettings } from './flake-attribution.js';
import { isMapping } from '../../src/mapping.js';

export const LAB_FILE_DEFAULT = 'fleetlab.lab.yaml';

/** How long a lease lasts without its holder's heartbeat, when the file does not say. */
export const DEFAULT_LEASE_TTL_SECONDS = 60;

export const LAB_FILE_EXAMPLE = `leases:
  store: sqlite:lab-leases.db       # or postgres://user@db-host/lab, shared by several CI hosts
  ttlSeconds: 60                    # a killed run's board is free again within this
health: {}                          # check boards before they are leased (defaults fit a Pi)
flakes: { runs: 20, retryWaitSeconds: 120 }  # counts over each board's last 20 runs; a retry waits 120 s for another board
boards:
  - name: pi4-a
    tags: [rpi4, 4gb]
    serial: /dev/ttyUSB0
    host: 192.0.2.10                # then any field of a board config (hil/boards/example.json)
    privateKey: ~/.ssh/fleetlab-lab
    power: { cycle: "lab-pdu --outlet 3 cycle" }`;

export interface LabBoard {
  readonly name: string;
  readonly tags: readonly string[];
  /** The serial console's device on the lab host, if it has one. */
  readonly serial?: string;
  readonly config: BoardConfig;
  /** The board config's fields as written (its key's path made absolute): the JSON the `board` target reads. */
  readonly raw: Readonly<Record<string, unknown>>;
  /** Its health check's steps and bounds; undefined when the lab checks no board. */
  readonly health?: BoardHealth;
}

export interface Lab {
  /** Where the file was read from: what errors and `lab status` name. */
  readonly source: string;
  /** `sqlite:FILE` (relative to the lab file) or `postgres://...`. */
  readonly store: string;
  readonly ttlSeconds: number;
  /** Health checks and quarantine; undefined without a `health` section (no checks). */
  readonly health?: LabHealth;
  /** Flake attribution's bounds (the defaults without a `flakes` section). */
  readonly flakes: FlakeSettings;
  readonly boards: readonly LabBoard[];
}

/** An error about the lab file; one about what is in it (a file mistake) shows an example. */
export function labError(source: string, message: string, opts: { example: boolean } = { example: true }): FleetlabError {
  return new FleetlabError('HIL_ERR_LAB', `lab file ${source}: ${message}${opts.example ? `\nexample:\n${LAB_FILE_EXAMPLE}` : ''}`);
}

type Fields = Record<string, unknown>;

/** Parses the text of a lab file read from `source`. Pure: reads nothing. */
export function parseLabFile(text: string, source: string, env: { home?: string } = {}): Lab {
  const fail = (message: string): never => {
    throw labError(source, message);
  };
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    fail(`not valid YAML: ${errorText(err)}`);
  }
  if (!isMapping(raw)) return fail('must be a mapping with "boards" (and optionally "leases")');
  const unknown = Object.keys(raw).filter((k) => !['boards', 'leases', 'health', 'flakes'].includes(k));
  if (unknown.length) fail(`unknown field "${unknown[0]}" (known: leases, health, flakes, boards)`);
  const health = parseLabHealth(raw.health, fail);
  const flakes = parseFlakes(raw.flakes, fail);

  const baseDir = dirname(resolve(source));
  const leases = raw.leases ?? {};
  if (!isMapping(leases)) fail('"leases" must be a mapping with "store" and "ttlSeconds"');
  const l = leases as Fields;
  const badLease = Object.keys(l).filter((k) => k !== 'store' && k !== 'ttlSeconds');
  if (badLease.length) fail(`unknown field "leases.${badLease[0]}" (known: store, ttlSeconds)`);
  const storeRaw = l.store ?? 'sqlite:.fleetlab/lab-leases.db';
  if (typeof storeRaw !== 'string') return fail(`"leases.store" must be sqlite:FILE or postgres://..., got ${JSON.stringify(storeRaw)}`);
  let store: string;
  if (storeRaw.startsWith('sqlite:') && storeRaw.length > 'sqlite:'.length) {
    const file = storeRaw.slice('sqlite:'.length);
    store = `sqlite:${isAbsolute(file) ? file : resolve(baseDir, file)}`;
  } else if (/^postgres(ql)?:\/\/./.test(storeRaw)) {
    store = storeRaw;
  } else {
    return fail(`"leases.store" must be sqlite:FILE or postgres://..., got ${JSON.stringify(storeRaw)}`);
  }
  const ttl = l.ttlSeconds ?? DEFAULT_LEASE_TTL_SECONDS;
  if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 2 || ttl > 86_400) fail(`"leases.ttlSeconds" must be a whole number of seconds from 2 to 86400, got ${JSON.stringify(ttl)}`);

  if (!Array.isArray(raw.boards) || raw.boards.length === 0) fail('"boards" must be a list of at least one board');
  const boards: LabBoard[] = [];
  (raw.boards as unknown[]).forEach((b, i) => {
    const at = `boards[${i}]`;
    if (!isMapping(b)) fail(`${at} must be a mapping with "name", "tags" and the board's config fields`);
    const { name, tags, health: boardHealth, ...config } = b as Fields;
    if (typeof name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) fail(`${at}.name must be a word of letters, digits, ".", "_" or "-", got ${JSON.stringify(name)}`);
    const label = `${at} (${name as string})`;
    const first = boards.findIndex((o) => o.name === name);
    if (first >= 0) fail(`${label}: another board is already called ${name as string} (boards[${first}]); each board is named once`);
    const checks = parseBoardHealth(boardHealth, label, health, fail);
    const tagList = tags ?? [];
    if (!Array.isArray(tagList) || tagList.some((t) => typeof t !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._:-]*$/.test(t))) {
      fail(`${label}.tags must be a list of words (e.g. [rpi4, 4gb]), got ${JSON.stringify(tags)}`);
    }
    let parsed: BoardConfig;
    try {
      parsed = parseBoardConfig(config, { source: `${source} ${label}`, baseDir, home: env.home, example: LAB_FILE_EXAMPLE });
    } catch (err) {
      throw new FleetlabError('HIL_ERR_LAB', errorText(err));
    }
    boards.push({ name: name as string, tags: tagList as string[], ...(parsed.serial ? { serial: parsed.serial.device } : {}), config: parsed, raw: { ...config, privateKey: parsed.privateKey }, ...(checks ? { health: checks } : {}) });
  });
  return { source, store, ttlSeconds: ttl as number, ...(health ? { health } : {}), flakes, boards };
}

/** The boards that carry every one of `tags`, in the file's order. */
export function boardsWithTags(lab: Lab, tags: readonly string[]): LabBoard[] {
  return lab.boards.filter((b) => tags.every((t) => b.tags.includes(t)));
}

/** As boardsWithTags, and none is an error naming the boards there are. */
export function matchingBoards(lab: Lab, tags: readonly string[]): LabBoard[] {
  const boards = boardsWithTags(lab, tags);
  if (boards.length === 0) throw labError(lab.source, `no board has the tags [${tags.join(', ')}]; boards: ${lab.boards.map((b) => `${b.name} [${b.tags.join(', ')}]`).join(', ')}`, { example: false });
  return boards;
}
