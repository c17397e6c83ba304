/**
 * How to start another fleetlab process from the code that is running now: from the
 * compiled tree (dist/) with plain node, or from the TypeScript sources through tsx.
 */
import { fileURLToPath } from 'node:url';

const fromSource = import.meta.url.endsWith('.ts');

/** node arguments that run the `fleetlab` CLI with `args`. */
export function cliCommand(args: string[]): { file: string; args: string[] } {
  const main = fileURLToPath(new URL(fromSource ? '../cli/main.ts' : '../cli/main.js', import.meta.url));
  return { file: process.execPath, args: [...(fromSource ? ['--import', 'tsx'] : []), main, ...args] };
}
