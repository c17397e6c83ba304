/**
 * The supervisor's ports: one interface per outside system. Each has exactly one production
 * adapter in this folder; simulated peers in sim/ stand behind the same adapters, so the
 * code that ships is the code that is tested.
 */
import type { Readable } from 'node:stream';

/** One GPIO output line driving the identify LED. */
export interface LedPort {
  /** Drive the LED on or off (activeLow is handled by the adapter). */
  set(on: boolean): Promise<void>;
  /** Unexport / release the line. */
  close(): Promise<void>;
}

export type ProxyType = 'socks4' | 'socks5' | 'http-connect' | 'http-relay';

export interface ProxySettings {
  type: ProxyType;
  ip: string;
  port: number;
  login?: string;
  password?: string;
  noProxy?: string[];
}

/** Hostname, proxy and power of the host OS (D-Bus: hostname1, systemd1, login1). */
export interface HostPort {
  getHostname(): Promise<string>;
  /** org.freedesktop.hostname1.SetStaticHostname */
  setHostname(name: string): Promise<void>;
  /** Reads the redsocks configuration back; undefined when no proxy is set. */
  getProxy(): Promise<ProxySettings | undefined>;
  /** Writes redsocks.conf and no_proxy (or removes them for undefined) and restarts the proxy unit. */
  setProxy(proxy: ProxySettings | undefined): Promise<void>;
  /** org.freedesktop.login1.Manager.Reboot */
  reboot(): Promise<void>;
  /** org.freedesktop.login1.Manager.PowerOff */
  powerOff(): Promise<void>;
  close(): Promise<void>;
}

export type JournalFormat =
  | 'short' | 'short-full' | 'short-iso' | 'short-iso-precise' | 'short-precise' | 'short-monotonic'
  | 'short-unix' | 'verbose' | 'export' | 'json' | 'json-pretty' | 'json-sse' | 'json-seq' | 'cat'
  | 'with-unit' | 'short-delta';

export interface JournalQuery {
  all?: boolean;
  follow?: boolean;
  count?: number;
  unit?: string;
  containerId?: string;
  format?: JournalFormat;
  since?: string;
  until?: string;
}

/**
 * The only containers whose entries a read may return (a key scoped to one app reads its
 * own containers' lines, never the host's or another app's).
 */
export interface JournalScope {
  /** Full (64 hex digit) container ids; none means nothing may be read. */
  containerIds: readonly string[];
}

/** Reads the device journal with journalctl. */
export interface JournalPort {
  /**
   * Starts journalctl for the query and gives its stdout. Aborting the signal kills the
   * child (the HTTP client went away). With a scope, only those containers' entries come
   * back, whatever the query asks for. Rejects with FleetlabError SUP_ERR_BAD_REQUEST for a
   * query journalctl would misread, SUP_ERR_TOOL_MISSING when journalctl is not installed.
   */
  stream(query: JournalQuery, signal: AbortSignal, scope?: JournalScope): Promise<Readable>;
  /**
   * Lets journalctl parse since/until (and match a followed unit pattern) before anything is
   * streamed, so a bad time is a 400 rather than a 200 stream that fails. Rejects like
   * stream() would.
   */
  check(query: JournalQuery): Promise<void>;
}
