/** Flag values more than one command group checks the same way. */
import { UsageError } from '../src/command/usage-hint.js';
import { isFleetlabError } from '../src/errors.js';
import { parseSupervisorVersion } from '../src/supervisor/versions.js';

/** A port flag: 0 (pick a free one) to 65535. */
export function parsePort(flag: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new UsageError(`${flag} must be 0..65535, got ${raw}`);
  return n;
}

/**
 * `--supervisor-version`: an upstream supervisor version fleetlab answers as. The check is the
 * supervisor's own (one message, with the range accepted); on the command line it reads as
 * any other flag's, with the pointer to the command's help.
 */
export function checkSupervisorVersion(flag: string, raw: string | undefined): void {
  if (raw === undefined) return;
  try {
    parseSupervisorVersion(raw, flag);
  } catch (err) {
    if (isFleetlabError(err)) throw new UsageError(err.message);
    throw err;
  }
}
