/**
 * IPv4 addresses and subnets (CIDR) as numbers: the supervisor network's settings and the
 * simulated engine's address management both need them. Pure.
 */

export interface Ipv4Subnet {
  /** The network address, as an unsigned 32-bit number. */
  base: number;
  prefix: number;
}

const OCTET = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

export function parseIpv4(text: string): number | undefined {
  const parts = text.split('.');
  if (parts.length !== 4 || !parts.every((p) => OCTET.test(p))) return undefined;
  return parts.reduce((n, p) => n * 256 + Number(p), 0);
}

export function formatIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

const mask = (prefix: number) => (prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0);

/**
 * `a.b.c.d/n`; `strict` refuses host bits after the prefix (`10.0.0.5/24`), which dockerd
 * takes as written but which names no network a person meant.
 */
export function parseIpv4Subnet(text: string, options: { strict?: boolean } = {}): Ipv4Subnet | undefined {
  const slash = text.indexOf('/');
  if (slash < 0) return undefined;
  const address = parseIpv4(text.slice(0, slash));
  const prefixText = text.slice(slash + 1);
  if (address === undefined || !/^(3[0-2]|[12]?\d)$/.test(prefixText)) return undefined;
  const prefix = Number(prefixText);
  const base = (address & mask(prefix)) >>> 0;
  if (options.strict && base !== address) return undefined;
  return { base, prefix };
}

export function formatIpv4Subnet(s: Ipv4Subnet): string {
  return `${formatIpv4(s.base)}/${s.prefix}`;
}

export function subnetSize(s: Ipv4Subnet): number {
  return 2 ** (32 - s.prefix);
}

export function inIpv4Subnet(address: number, s: Ipv4Subnet): boolean {
  return ((address & mask(s.prefix)) >>> 0) === s.base;
}

export function ipv4SubnetsOverlap(a: Ipv4Subnet, b: Ipv4Subnet): boolean {
  const prefix = Math.min(a.prefix, b.prefix);
  return ((a.base & mask(prefix)) >>> 0) === ((b.base & mask(prefix)) >>> 0);
}

/** The subnet's first host address: where dockerd puts a bridge network's gateway unless told otherwise. */
export function firstHost(s: Ipv4Subnet): number {
  return s.base + 1;
}
