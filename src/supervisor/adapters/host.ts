/**
 * The host adapter: hostname, proxy and power of the host OS through systemd's D-Bus
 * services (hostname1, systemd1, login1), and the proxy files on the boot partition. On a
 * board the bus is the system bus; on a simulated device it is a private dbus-daemon with
 * the peer from sim/dbus; the code path is the same.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FleetlabError, badRequest, errorText } from '../../errors.js';
import { fsyncPath, removeFileDurable, writeFileAtomic } from '../../atomic-file.js';
import { DbusClient, dbusErrorName } from './dbus-client.js';
import { isValidHostname } from './hostname-rules.js';
import type { HostPort, ProxySettings } from './ports.js';
import { formatNoProxy, formatRedsocksConf, parseNoProxy, parseRedsocksConf, validateProxy } from './redsocks-conf.js';

export interface HostAdapterOptions {
  /** Default: DBUS_SYSTEM_BUS_ADDRESS, else the system bus socket. */
  busAddress?: string;
  /** Directory holding redsocks.conf and no_proxy; on a board /mnt/boot/system-proxy. */
  proxyConfigDir: string;
  /** The unit restarted after a proxy change. Default redsocks.service. */
  proxyUnit?: string;
  /** How long a D-Bus call may stay unanswered. Default 25 s (the libdbus default). */
  callTimeoutMs?: number;
}

const HOSTNAME1 = { destination: 'org.freedesktop.hostname1', path: '/org/freedesktop/hostname1', interface: 'org.freedesktop.hostname1' };
const SYSTEMD1 = { destination: 'org.freedesktop.systemd1', path: '/org/freedesktop/systemd1', interface: 'org.freedesktop.systemd1.Manager' };
const LOGIN1 = { destination: 'org.freedesktop.login1', path: '/org/freedesktop/login1', interface: 'org.freedesktop.login1.Manager' };

const INVALID_ARGS = 'org.freedesktop.DBus.Error.InvalidArgs';

function isENOENT(err: unknown): boolean {
  return (err as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
}

async function readOptional(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if (isENOENT(err)) return undefined;
    throw new FleetlabError('SUP_ERR_HOST', `cannot read ${path}: ${errorText(err)}`, { cause: err });
  }
}

function fileError(action: string, err: unknown): FleetlabError {
  return new FleetlabError('SUP_ERR_HOST', `cannot ${action}: ${errorText(err)}`, { cause: err });
}

/**
 * hostnamed renames the new /etc/hostname into place without fsync: a power cut seconds
 * later (measured on the QEMU board) boots with the old name. The host config must survive
 * a hard power cycle like the rest of the device state, so the file and its directory are
 * flushed here. Best effort: a host keeping the name elsewhere has nothing to flush here.
 */
async function syncStaticHostname(): Promise<void> {
  for (const path of ['/etc/hostname', '/etc']) {
    try {
      await fsyncPath(path);
    } catch {
      // absent or not ours to flush
    }
  }
}

export function createHostAdapter(options: HostAdapterOptions): HostPort {
  const client = new DbusClient({ busAddress: options.busAddress, callTimeoutMs: options.callTimeoutMs });
  const proxyUnit = options.proxyUnit ?? 'redsocks.service';
  const redsocksPath = join(options.proxyConfigDir, 'redsocks.conf');
  const noProxyPath = join(options.proxyConfigDir, 'no_proxy');

  const readHostnameProperty = async (name: 'StaticHostname' | 'Hostname'): Promise<string> => {
    const value = await client.getProperty(HOSTNAME1.destination, HOSTNAME1.path, HOSTNAME1.interface, name);
    if (typeof value !== 'string') {
      throw new FleetlabError('SUP_ERR_HOST', `org.freedesktop.hostname1.${name} is not a string`);
    }
    return value;
  };

  const restartProxyUnit = async (): Promise<void> => {
    // 'fail' rather than 'replace': never cancel a stop/start of the unit someone else queued.
    await client.call({ ...SYSTEMD1, member: 'RestartUnit', signature: 'ss', body: [proxyUnit, 'fail'] });
  };

  return {
    async getHostname() {
      // StaticHostname is empty when none is configured; then the transient name is the answer.
      const configured = await readHostnameProperty('StaticHostname');
      return configured !== '' ? configured : readHostnameProperty('Hostname');
    },

    async setHostname(name) {
      // An empty name resets to the OS default, as hostnamed does.
      if (name !== '' && !isValidHostname(name)) {
        throw badRequest(
          `hostname ${JSON.stringify(name)} is invalid: use 1 to 64 letters, digits, hyphens and dots, no label starting or ending with a hyphen`,
        );
      }
      try {
        await client.call({ ...HOSTNAME1, member: 'SetStaticHostname', signature: 'sb', body: [name, false] });
      } catch (err) {
        // hostnamed is the authority: if it refuses a name we let through, it is still bad input.
        if (dbusErrorName(err) === INVALID_ARGS) throw badRequest(`hostname refused by the host: ${errorText(err)}`);
        throw err;
      }
      await syncStaticHostname();
    },

    async getProxy() {
      const conf = await readOptional(redsocksPath);
      if (conf === undefined) return undefined;
      const proxy = parseRedsocksConf(conf, redsocksPath);
      if (!proxy) return undefined;
      const noProxy = await readOptional(noProxyPath);
      const entries = noProxy === undefined ? [] : parseNoProxy(noProxy);
      if (entries.length > 0) proxy.noProxy = entries;
      return proxy;
    },

    async setProxy(proxy: ProxySettings | undefined) {
      if (proxy === undefined) {
        try {
          await removeFileDurable(redsocksPath);
          await removeFileDurable(noProxyPath);
        } catch (err) {
          throw fileError(`remove the proxy configuration in ${options.proxyConfigDir}`, err);
        }
      } else {
        validateProxy(proxy);
        const conf = formatRedsocksConf(proxy);
        const noProxy = formatNoProxy(proxy.noProxy);
        try {
          // no_proxy first: redsocks.conf is what marks a proxy as configured.
          if (noProxy === undefined) await removeFileDurable(noProxyPath);
          else await writeFileAtomic(noProxyPath, noProxy);
          // It holds the proxy password.
          await writeFileAtomic(redsocksPath, conf, 0o600);
        } catch (err) {
          throw fileError(`write the proxy configuration in ${options.proxyConfigDir}`, err);
        }
      }
      await restartProxyUnit();
    },

    async reboot() {
      await client.call({ ...LOGIN1, member: 'Reboot', signature: 'b', body: [false] });
    },

    async powerOff() {
      await client.call({ ...LOGIN1, member: 'PowerOff', signature: 'b', body: [false] });
    },

    async close() {
      await client.close();
    },
  };
}
