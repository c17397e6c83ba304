/**
 * Which host directories the container target's teardown removes for a crashed run's device
 * container (hil/targets/container-teardown.ts): only names it makes, in the places it makes
 * them, whatever path a container's label says.
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { madeByTarget } from '../hil/targets/container-teardown.js';

const base = mkdtempSync(join(tmpdir(), 'fleetlab-teardown-'));
chmodSync(base, 0o755);
afterAll(() => rmSync(base, { recursive: true, force: true }));

describe('madeByTarget', () => {
  it("takes the target's own names in /tmp, in a user's fleetlab-<uid> and in a TMPDIR private to this user", () => {
    expect(madeByTarget('/tmp/fleetlab-ctr-a1B2c3')).toBe(true);
    expect(madeByTarget(join(base, 'fleetlab-1000', 'fleetlab-ctr-a1B2c3'))).toBe(true);
    const priv = join(base, 'private');
    mkdirSync(priv, { mode: 0o700 });
    expect(madeByTarget(join(priv, 'fleetlab-ctr-a1B2c3'))).toBe(true);
  });

  it('refuses any other name or place, and a path that is not in its plain form', () => {
    expect(madeByTarget(join(base, 'fleetlab-ctr-a1B2c3'))).toBe(false); // a shared directory, not this user's own
    expect(madeByTarget('/tmp/fleetlab-ctr-a1B2c')).toBe(false);
    expect(madeByTarget('/home/me')).toBe(false);
    expect(madeByTarget('/tmp/x/../fleetlab-ctr-a1B2c3')).toBe(false);
  });
});
