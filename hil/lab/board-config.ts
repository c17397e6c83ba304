/**
 * The `board` target's config: one small JSON file per lab board, named by
 * FLEETLAB_BOARD_CONFIG ("adding a board is adding a config file"). Parsing is pure and
 * checks every field, so a typo fails when the target loads, naming the field, not halfway
 * through a spec. What the board can do (`boardCapabilities`) follows from the config alone.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { FleetlabError, errorText } from '../../src/errors.js';
import { parseLedGpio } from '../../src/supervisor/adapters/led.js';
import type { Capability } from '../../device-access/protocols.js';
import { isMapping } from '../../src/mapping.js';

export const BOARD_CONFIG_VARIABLE = 'FLEETLAB_BOARD_CONFIG';

/** What an error shows the example of when the config is a lab file's board. */
const LAB_EXAMPLE_NAME = 'fleetlab.lab.yaml';

/** The device API port the supervisor listens on by default. */
const DEFAULT_API_PORT = 48484;

export const BOARD_CONFIG_EXAMPLE = `{
  "host": "192.0.2.10",
  "privateKey": "~/.ssh/fleetlab-lab",
  "led": { "gpio": "pinctrl-bcm2835:17", "observe": "sysfs" },
  "power": { "cycle": "lab-pdu cycle 3" }
}`;

/** A line of a chip named by its label (sysfs base read on the device), or a global number. */
export type BoardLedGpio = number | { readonly chip: string; readonly offset: number };

export interface BoardConfig {
  readonly host: string;
  readonly sshPort: number;
  readonly user: string;
  /** Absolute path on the lab host (relative paths are taken from the config file's directory). */
  readonly privateKey: string;
  readonly apiUrl: string;
  /** Absent: the device key is read from the supervisor's store on the device. */
  readonly apiKey?: string;
  readonly dataDir: string;
  readonly vendor: string;
  readonly lockRoot: string;
  /** The supervisor's systemd unit, for its log. */
  readonly supervisorUnit: string;
  /** How much slower than the simulator this board is; the specs' deadlines scale by it. */
  readonly timeScale: number;
  /**
   * Wipe what the supervisor made and restore the host config before each spec file
   * (device-access/ssh-reset.ts), so each file gets a fresh device; false leaves the board as the last
   * file left it.
   */
  readonly reset: boolean;
  readonly hostPaths: { readonly hostname: string; readonly proxyConfigDir: string; readonly bootConfig: string };
  readonly led?: {
    readonly gpio: BoardLedGpio;
    /** `sysfs`: sampled on the device over SSH; `command`: a lab-host command printing 0/1 lines. */
    readonly observe: { readonly kind: 'sysfs'; readonly pollMs: number } | { readonly kind: 'command'; readonly command: string };
  };
  /**
   * Lab-host shell commands; only the ones given back a capability. `timeoutSeconds`: how long
   * the board may take to answer again after a cycle or on (default: 180 s times timeScale)
   * before it counts as offline, an infrastructure failure.
   */
  readonly power: { readonly cycle?: string; readonly off?: string; readonly on?: string; readonly timeoutSeconds?: number };
  /** The board's serial console as the lab host sees it (a USB adapter's tty), captured while a worker holds the board. */
  readonly serial?: { readonly device: string; readonly baud: number };
}

function configError(source: string, message: string, example = `(${BOARD_CONFIG_VARIABLE}=hil/boards/example.json):\n${BOARD_CONFIG_EXAMPLE}`): FleetlabError {
  return new FleetlabError('SUP_ERR_BAD_REQUEST', `board config ${source}: ${message}\nexample ${example}`);
}

type Fields = Record<string, unknown>;

/** Reads the JSON file FLEETLAB_BOARD_CONFIG names and parses it. */
export function loadBoardConfig(env: NodeJS.ProcessEnv = process.env): BoardConfig {
  const path = env[BOARD_CONFIG_VARIABLE];
  if (!path) throw configError(`(${BOARD_CONFIG_VARIABLE} unset)`, `set ${BOARD_CONFIG_VARIABLE} to the path of the lab board's JSON config`);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw configError(path, `cannot read it (${errorText(err)}); ${BOARD_CONFIG_VARIABLE} must name a readable JSON file`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw configError(path, `not valid JSON: ${errorText(err)}`);
  }
  return parseBoardConfig(raw, { source: path, baseDir: dirname(resolve(path)), home: env.HOME });
}

/**
 * Validates a parsed config and fills the defaults. Pure: reads nothing. `example` is what
 * an error shows (a lab file shows its own).
 */
export function parseBoardConfig(raw: unknown, where: { source: string; baseDir: string; home?: string; example?: string }): BoardConfig {
  const fail = (message: string): never => {
    throw configError(where.source, message, where.example === undefined ? undefined : `(${LAB_EXAMPLE_NAME}):\n${where.example}`);
  };
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail('must be a JSON object');
  const o = raw as Fields;
  const known = ['host', 'sshPort', 'user', 'privateKey', 'apiUrl', 'apiKey', 'dataDir', 'vendor', 'lockRoot', 'supervisorUnit', 'hostPaths', 'led', 'power', 'timeScale', 'reset', 'serial'];
  const unknown = Object.keys(o).filter((k) => !known.includes(k));
  if (unknown.length) fail(`unknown field${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `"${k}"`).join(', ')} (known: ${known.join(', ')})`);

  const text = (obj: Fields, key: string, label = key): string | undefined => {
    const v = obj[key];
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || v.trim() === '') fail(`"${label}" must be a non-empty string, got ${JSON.stringify(v)}`);
    return v as string;
  };
  const path = (obj: Fields, key: string, fallback: string, label = key): string => {
    const v = text(obj, key, label) ?? fallback;
    if (!v.startsWith('/')) fail(`"${label}" must be an absolute device path, got ${JSON.stringify(v)}`);
    return v;
  };

  const host = text(o, 'host') ?? fail('"host" is required: the board\'s address as the lab host reaches it');
  if (/\s|\//.test(host)) fail(`"host" must be a bare hostname or address, got ${JSON.stringify(host)}`);

  let sshPort = 22;
  if (o.sshPort !== undefined) {
    if (typeof o.sshPort !== 'number' || !Number.isInteger(o.sshPort) || o.sshPort < 1 || o.sshPort > 65535) fail(`"sshPort" must be an integer 1-65535, got ${JSON.stringify(o.sshPort)}`);
    sshPort = o.sshPort as number;
  }
  const user = text(o, 'user') ?? 'root';

  const keyText = text(o, 'privateKey') ?? fail('"privateKey" is required: path (on the lab host) of the SSH private key the board accepts');
  const privateKey = keyText.startsWith('~/')
    ? where.home
      ? resolve(where.home, keyText.slice(2))
      : fail(`"privateKey" starts with ~/ but HOME is unset`)
    : isAbsolute(keyText)
      ? keyText
      : resolve(where.baseDir, keyText);

  const urlHost = host.includes(':') ? `[${host}]` : host;
  const apiUrl = (text(o, 'apiUrl') ?? `http://${urlHost}:${DEFAULT_API_PORT}`).replace(/\/+$/, '');
  try {
    const u = new URL(apiUrl);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`protocol ${u.protocol}`);
  } catch (err) {
    fail(`"apiUrl" must be an http(s) URL, got ${JSON.stringify(apiUrl)} (${errorText(err)})`);
  }
  const apiKey = text(o, 'apiKey');

  const vendor = text(o, 'vendor') ?? 'platform';
  // The supervisor's own rule for the word (src/supervisor/config.ts).
  if (!/^[a-z][a-z0-9]*$/.test(vendor)) fail(`"vendor" must be a lowercase word, got ${JSON.stringify(vendor)}`);

  let hostPathsRaw: Fields = {};
  if (o.hostPaths !== undefined) {
    if (typeof o.hostPaths !== 'object' || o.hostPaths === null || Array.isArray(o.hostPaths)) fail('"hostPaths" must be an object');
    hostPathsRaw = o.hostPaths as Fields;
    const bad = Object.keys(hostPathsRaw).filter((k) => !['hostname', 'proxyConfigDir', 'bootConfig'].includes(k));
    if (bad.length) fail(`unknown field "hostPaths.${bad[0]}" (known: hostname, proxyConfigDir, bootConfig)`);
  }

  return {
    host,
    sshPort,
    user,
    privateKey,
    apiUrl,
    ...(apiKey ? { apiKey } : {}),
    dataDir: path(o, 'dataDir', '/var/lib/fleetlab'),
    vendor,
    lockRoot: path(o, 'lockRoot', '/tmp/fleetlab/locks'),
    supervisorUnit: text(o, 'supervisorUnit') ?? 'fleetlab-supervisor.service',
    timeScale: parseTimeScale(o.timeScale, fail),
    reset: o.reset === undefined ? true : typeof o.reset === 'boolean' ? o.reset : fail(`"reset" must be true or false, got ${JSON.stringify(o.reset)}`),
    hostPaths: {
      hostname: path(hostPathsRaw, 'hostname', '/etc/hostname', 'hostPaths.hostname'),
      proxyConfigDir: path(hostPathsRaw, 'proxyConfigDir', '/mnt/boot/system-proxy', 'hostPaths.proxyConfigDir'),
      bootConfig: path(hostPathsRaw, 'bootConfig', '/mnt/boot/config.txt', 'hostPaths.bootConfig'),
    },
    ...(o.led !== undefined ? { led: parseLed(o.led, fail) } : {}),
    power: parsePower(o.power, fail),
    ...(o.serial !== undefined ? { serial: parseSerial(o.serial, fail) } : {}),
  };
}

/** Baud rates a Pi's UART and common USB adapters take. */
const BAUDS = [9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600];

/** `"/dev/ttyUSB0"`, or `{"device": "/dev/ttyUSB0", "baud": 115200}`; the Pi's console runs at 115200. */
function parseSerial(raw: unknown, fail: (m: string) => never): NonNullable<BoardConfig['serial']> {
  const o: Fields = typeof raw === 'string' ? { device: raw } : isMapping(raw) ? raw : {};
  const bad = Object.keys(o).filter((k) => k !== 'device' && k !== 'baud');
  if (bad.length) fail(`unknown field "serial.${bad[0]}" (known: device, baud)`);
  if (typeof o.device !== 'string' || !o.device.startsWith('/')) fail(`serial must be the serial device's absolute path on the lab host (e.g. /dev/ttyUSB0) or {"device": ..., "baud": 115200}, got ${JSON.stringify(raw)}`);
  const baud = o.baud ?? 115200;
  if (typeof baud !== 'number' || !BAUDS.includes(baud)) fail(`"serial.baud" must be one of ${BAUDS.join(', ')}, got ${JSON.stringify(o.baud)}`);
  return { device: o.device as string, baud: baud as number };
}

function parseTimeScale(raw: unknown, fail: (m: string) => never): number {
  if (raw === undefined) return 1;
  if (typeof raw !== 'number' || !Number.isFinite(raw) || raw < 1 || raw > 100) fail(`"timeScale" must be a number from 1 to 100, got ${JSON.stringify(raw)}`);
  return raw as number;
}

function parseLed(raw: unknown, fail: (m: string) => never): NonNullable<BoardConfig['led']> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail('"led" must be an object like {"gpio": "pinctrl-bcm2835:17", "observe": "sysfs"}');
  const o = raw as Fields;
  const bad = Object.keys(o).filter((k) => !['gpio', 'observe', 'pollMs'].includes(k));
  if (bad.length) fail(`unknown field "led.${bad[0]}" (known: gpio, observe, pollMs)`);

  // The supervisor's own ledGpio format, or a JSON number.
  let gpio: BoardLedGpio | undefined;
  try {
    gpio = typeof o.gpio === 'number' && Number.isInteger(o.gpio) && o.gpio >= 0 ? o.gpio : typeof o.gpio === 'string' ? parseLedGpio(o.gpio) : undefined;
  } catch {
    gpio = undefined;
  }
  if (gpio === undefined) fail(`"led.gpio" must be "<chip label>:<offset>" (e.g. "pinctrl-bcm2835:17") or a GPIO number, got ${JSON.stringify(o.gpio)}`);

  let pollMs = 20;
  if (o.pollMs !== undefined) {
    if (typeof o.pollMs !== 'number' || !Number.isInteger(o.pollMs) || o.pollMs < 1 || o.pollMs > 10_000) fail(`"led.pollMs" must be an integer 1-10000, got ${JSON.stringify(o.pollMs)}`);
    pollMs = o.pollMs as number;
  }
  const observe = o.observe ?? 'sysfs';
  if (observe === 'sysfs') return { gpio, observe: { kind: 'sysfs', pollMs } };
  if (isMapping(observe)) {
    const command = (observe as Fields).command;
    if (typeof command === 'string' && command.trim() !== '' && Object.keys(observe).length === 1) return { gpio, observe: { kind: 'command', command } };
  }
  return fail(`"led.observe" must be "sysfs" or {"command": "<lab-host command printing 0/1 lines>"}, got ${JSON.stringify(observe)}`);
}

function parsePower(raw: unknown, fail: (m: string) => never): BoardConfig['power'] {
  if (raw === undefined) return {};
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail('"power" must be an object like {"cycle": "<lab-host command>"}');
  const o = raw as Fields;
  const out: { cycle?: string; off?: string; on?: string; timeoutSeconds?: number } = {};
  for (const [key, value] of Object.entries(o)) {
    if (key === 'timeoutSeconds') {
      if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 3600) fail(`"power.timeoutSeconds" must be a whole number of seconds from 1 to 3600, got ${JSON.stringify(value)}`);
      out.timeoutSeconds = value as number;
      continue;
    }
    if (key !== 'cycle' && key !== 'off' && key !== 'on') fail(`unknown field "power.${key}" (known: cycle, off, on, timeoutSeconds)`);
    if (typeof value !== 'string' || value.trim() === '') fail(`"power.${key}" must be a non-empty shell command, got ${JSON.stringify(value)}`);
    out[key as 'cycle' | 'off' | 'on'] = value as string;
  }
  // One half of a cut is a board left off with no way back (or never cut): refuse it here.
  if ((out.off === undefined) !== (out.on === undefined)) fail('"power.off" and "power.on" go together: give both or neither');
  return out;
}

/**
 * What the board offers under this config. api, exec, files (+ volumes over the device's
 * docker CLI), journal, reboot and images (a release pulled from a registry reached over SSH)
 * come with SSH; led and the hard power actions only when the config says how. A cycle
 * without its own command is off, then on.
 */
export function boardCapabilities(config: BoardConfig): Capability[] {
  const caps: Capability[] = ['api', 'exec', 'files', 'files.volumes', 'journal', 'power.reboot', 'supervisor.kill', 'engine.restart', 'disk.fill', 'images'];
  if (config.led) caps.push('led');
  const cut = config.power.off !== undefined && config.power.on !== undefined;
  if (config.power.cycle !== undefined || cut) caps.push('power.cycle');
  if (cut) caps.push('power.cut');
  return caps;
}
