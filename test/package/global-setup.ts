/**
 * `npm run test:package`'s setup: the tarball, npm 12 and the team's Node once for both files
 * (packing alone is about 45 s: prepack compiles dist/ and the device payload).
 * FLEETLAB_PACKAGE_TARBALL names a tarball packed from this checkout already: .ci/run packs once
 * for its two runs of this config, the team app beside the HIL projects and the CI runner's user after.
 */
import type { TestProject } from 'vitest/node';
import { preparePackage, type Packed } from './packed.js';

declare module 'vitest' {
  export interface ProvidedContext {
    fleetlabPackage: Packed;
  }
}

export default async function setup(project: TestProject): Promise<() => void> {
  const { remove, ...packed } = await preparePackage(process.env.FLEETLAB_PACKAGE_TARBALL || undefined);
  project.provide('fleetlabPackage', packed);
  return remove;
}
