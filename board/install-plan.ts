/**
 * The decisions of `fleetlab board install` and `uninstall`, apart from the SSH that carries
 * them out (./install.ts): where the board is, what one look at it says (one probe script,
 * one round trip), what it lacks and which Debian package brings it, which LED line to drive,
 * and the manifest an install leaves on the board for the next install and for uninstall.
 * Pure: text in, decisions out.
 */
import { FleetlabError } from '../src/errors.js';
import { BOARD } from '../device-image/board-layout.js';

export interface SshTarget {
  readonly user: string;
  readonly host: string;
  readonly port: number;
}

function installError(message: string): FleetlabError {
  return new FleetlabError('HIL_ERR_BOARD_INSTALL', message);
}

/** `ssh://user@host[:port]` (or `user@host[:port]`): where the board is. */
export function parseSshTarget(text: string): SshTarget {
  const example = 'ssh://pi@192.0.2.10 or ssh://root@raspberrypi.local:22';
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `ssh://${text}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw installError(`the board address ${JSON.stringify(text)} is not ssh://user@host[:port] (for example ${example})`);
  }
  if (url.protocol !== 'ssh:') throw installError(`the board address must be an ssh:// URL, got ${url.protocol}// (for example ${example})`);
  if (!url.username) throw installError(`the board address ${JSON.stringify(text)} names no user: ssh://USER@host (the user logs in with your key and is root or has passwordless sudo; for example ${example})`);
  if (url.password) throw installError('the board address carries a password: fleetlab logs in with an SSH key (--identity), never a password');
  if (!url.hostname) throw installError(`the board address ${JSON.stringify(text)} names no host (for example ${example})`);
  if ((url.pathname && url.pathname !== '/') || url.search || url.hash) throw installError(`the board address ${JSON.stringify(text)} has a path or query; it is only ssh://user@host[:port]`);
  return { user: decodeURIComponent(url.username), host: url.hostname.replace(/^\[|\]$/g, ''), port: url.port ? Number(url.port) : 22 };
}

/** Commands the supervisor uses on the board, each with the Debian package that brings it. */
export const NEEDED_COMMANDS: ReadonlyArray<{ readonly command: string; readonly why: string; readonly packageFor: (codename: string) => string }> = [
  { command: 'dockerd', why: 'the container engine', packageFor: () => 'docker.io' },
  // Debian 13 moved the docker command out of docker.io.
  { command: 'docker', why: 'the docker command (the HIL harness uses it for volumes and images)', packageFor: (c) => (['bullseye', 'bookworm'].includes(c) ? 'docker.io' : 'docker-cli') },
  { command: 'redsocks', why: 'the proxy the supervisor configures (docs/decisions.md item 10)', packageFor: () => 'redsocks' },
  { command: 'journalctl', why: 'the journal the supervisor reads its logs from', packageFor: () => 'systemd' },
  { command: 'busctl', why: 'D-Bus calls (hostname, reboot)', packageFor: () => 'systemd' },
  { command: 'hostnamed', why: 'systemd-hostnamed, which sets the hostname over D-Bus', packageFor: () => 'systemd' },
  { command: 'dbus', why: 'the system D-Bus', packageFor: () => 'dbus' },
];

export interface BoardProbe {
  readonly arch: string;
  readonly osId: string;
  readonly osLike: string;
  readonly codename: string;
  readonly prettyName: string;
  readonly systemd: boolean;
  /** Commands of NEEDED_COMMANDS found, plus `apt-get`. */
  readonly has: ReadonlySet<string>;
  /** `/proc/device-tree/model`, empty where there is none. */
  readonly model: string;
  /** Raspberry Pi OS's firmware partition, where config.txt lives, when the board has one. */
  readonly firmwareDir?: string;
  /** The manifest a previous install left, as text. */
  readonly manifest?: string;
}

/**
 * One look at the board, as `key=value` lines. Run as root (through sudo when the user is not),
 * with sbin on PATH: a login shell of an ordinary user does not find dockerd.
 */
export function probeScript(): string {
  return [
    'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    'echo "arch=$(uname -m)"',
    'if [ -r /etc/os-release ]; then . /etc/os-release; echo "os_id=${ID:-}"; echo "os_like=${ID_LIKE:-}"; echo "codename=${VERSION_CODENAME:-}"; echo "pretty=${PRETTY_NAME:-}"; fi',
    '[ -d /run/systemd/system ] && echo systemd=1',
    'for c in dockerd docker redsocks journalctl busctl apt-get; do command -v "$c" >/dev/null 2>&1 && echo "has=$c"; done',
    '{ [ -x /lib/systemd/systemd-hostnamed ] || [ -x /usr/lib/systemd/systemd-hostnamed ]; } && echo has=hostnamed',
    '{ [ -S /run/dbus/system_bus_socket ] || command -v dbus-daemon >/dev/null 2>&1 || command -v dbus-broker >/dev/null 2>&1; } && echo has=dbus',
    '[ -r /proc/device-tree/model ] && echo "model=$(tr -d \'\\000\' < /proc/device-tree/model)"',
    '[ -f /boot/firmware/config.txt ] && echo firmware=/boot/firmware',
    `[ -f ${BOARD.manifest} ] && echo "manifest=$(base64 -w0 ${BOARD.manifest})"`,
    'true',
  ].join('\n');
}

export function parseProbe(stdout: string): BoardProbe {
  const fields = new Map<string, string>();
  const has = new Set<string>();
  for (const line of stdout.split('\n')) {
    const eq = line.indexOf('=');
    if (eq < 0) continue;
    const key = line.slice(0, eq);
    const value = line.slice(eq + 1).trim();
    if (key === 'has') has.add(value);
    else fields.set(key, value);
  }
  const manifest = fields.get('manifest');
  const firmwareDir = fields.get('firmware');
  return {
    arch: fields.get('arch') ?? '',
    osId: fields.get('os_id') ?? '',
    osLike: fields.get('os_like') ?? '',
    codename: fields.get('codename') ?? '',
    prettyName: fields.get('pretty') ?? '',
    systemd: fields.get('systemd') === '1',
    has,
    model: fields.get('model') ?? '',
    ...(firmwareDir ? { firmwareDir } : {}),
    ...(manifest ? { manifest: Buffer.from(manifest, 'base64').toString('utf8') } : {}),
  };
}

/** Refuses a board the supervisor does not run on, saying what would do. */
export function checkBoard(probe: BoardProbe, where: string): void {
  if (probe.arch !== 'aarch64') {
    throw installError(`${where} is ${probe.arch || 'of an unknown architecture'}; the supervisor's Node and addon are built for 64-bit Arm (aarch64): flash the 64-bit Raspberry Pi OS (or Debian arm64) on it`);
  }
  const debian = probe.osId === 'debian' || probe.osId === 'raspbian' || probe.osLike.split(/\s+/).includes('debian');
  if (!debian) throw installError(`${where} runs ${probe.prettyName || probe.osId || 'an unknown OS'}; fleetlab board install supports Debian and Raspberry Pi OS (bookworm or later)`);
  if (!probe.systemd) throw installError(`${where} was not booted with systemd (/run/systemd/system is missing); the supervisor runs as a systemd service and talks to systemd-hostnamed and logind`);
}

/** The Debian packages that bring what the board lacks (deduplicated), and what each missing piece is for. */
export function missingPackages(probe: BoardProbe): { packages: string[]; missing: string[] } {
  const absent = NEEDED_COMMANDS.filter((n) => !probe.has.has(n.command));
  return {
    packages: [...new Set(absent.map((n) => n.packageFor(probe.codename)))],
    missing: absent.map((n) => `${n.command} (${n.why})`),
  };
}

/** The command a person runs on the board to add the packages by hand. */
export function aptCommand(packages: readonly string[]): string {
  return `sudo apt-get update && sudo apt-get install -y --no-install-recommends ${packages.join(' ')}`;
}

/** What an install did to the board: written before each change, so a killed install is finished or undone from it. */
export interface InstallManifest {
  readonly format: 1;
  /** The fleetlab version of the supervisor installed. */
  readonly version: string;
  /** Hash of the supervisor's files (Node, bundle, addon): equal means nothing to send. */
  readonly payload: string;
  readonly node: string;
  readonly installedAt: string;
  /** Debian packages this install added with apt: uninstall purges them. */
  readonly packages: readonly string[];
  /** dockerd's config before the first install changed it; null: there was none. Absent: not changed. */
  readonly dockerConfigBefore?: string | null;
  /** Engine images present before the first install: uninstall keeps them and removes the rest. */
  readonly imagesBefore?: readonly string[];
  /** Where config.txt and system-proxy/ are. */
  readonly bootDir: string;
  /** Paths this install created outside BOARD's own directories: uninstall removes them. */
  readonly created: readonly string[];
  readonly ledGpio: string;
}

export function parseManifest(text: string, where: string): InstallManifest {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw installError(`${BOARD.manifest} on ${where} is not JSON: it was damaged or written by hand; move it aside and install again`);
  }
  const m = raw as Partial<InstallManifest>;
  if (typeof m !== 'object' || m === null || m.format !== 1 || typeof m.payload !== 'string' || !Array.isArray(m.packages) || !Array.isArray(m.created) || typeof m.bootDir !== 'string') {
    throw installError(`${BOARD.manifest} on ${where} is not a fleetlab install manifest of a format this fleetlab knows (format 1)`);
  }
  return m as InstallManifest;
}

/**
 * Of the paths a board lacked, the ones an install records as made: not those inside another
 * path it made (removing the directory takes them along), nor those already recorded.
 */
export function pathsMade(absent: readonly string[], recorded: readonly string[]): string[] {
  const within = (p: string, dirs: readonly string[]) => dirs.some((d) => p === d || p.startsWith(`${d}/`));
  return absent.filter((p) => !within(p, absent.filter((q) => q !== p)) && !within(p, recorded));
}

/** Directories and files that are fleetlab's whatever the manifest says: uninstall removes them. */
export const OWN_PATHS = [BOARD.appDir, BOARD.configDir, BOARD.dataDir, `${BOARD.dataDir}-clock`, BOARD.compileCache, BOARD.lockRoot.replace(/\/locks$/, ''), BOARD.unitFile] as const;
