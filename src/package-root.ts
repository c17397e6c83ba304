/**
 * The fleetlab a module belongs to, a checkout or an installed package: the nearest directory
 * above the module whose package.json is fleetlab's. A module sits at a different depth in
 * each (`hil/x.ts` in a checkout, `dist/hil/x.js` in the package), so no fixed `../..` fits.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FleetlabError } from './errors.js';

export function fleetlabRoot(moduleUrl: string): string {
  let dir = dirname(fileURLToPath(moduleUrl));
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'fleetlab') return dir;
    const up = dirname(dir);
    if (up === dir) throw new FleetlabError('SUP_ERR_INTERNAL', `no fleetlab package.json above ${fileURLToPath(moduleUrl)}`);
    dir = up;
  }
}

/** The version of the fleetlab a module belongs to, as its package.json says. */
export function fleetlabVersion(moduleUrl: string): string {
  return (JSON.parse(readFileSync(join(fleetlabRoot(moduleUrl), 'package.json'), 'utf8')) as { version: string }).version;
}
