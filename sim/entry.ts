/**
 * How to start another fleetlab process from the code that is running now: from the
 * compiled tree (dist/) with plain node, or from the TypeScript sources through tsx.
 */
import { fileURLToPath } from 'node:url';

const fromSource = import.meta.url.endsWith('.ts');

/** A module of sim/ (`clock/shifted-clock`) as this tree has it, to load with `--import`. */
export function simModule(name: string): string {
  return fileURLToPath(new URL(`./${name}${fromSource ? '.ts' : '.js'}`, import.meta.url));
}

/** node arguments that run the `fleetlab` CLI with `args`, after loading the `preload` modules. */
export function cliCommand(args: string[], preload: readonly string[] = []): { file: string; args: string[] } {
  const main = fileURLToPath(new URL(fromSource ? '../cli/main.ts' : '../cli/main.js', import.meta.url));
  return { file: process.execPath, args: [...(fromSource ? ['--import', 'tsx'] : []), ...preload.flatMap((m) => ['--import', m]), main, ...args] };
}

/** A module of sim/ to run as a forked worker, and the node options it needs in this tree. */
export function simWorker(name: string): { module: string; execArgv: string[] } {
  return { module: simModule(name), execArgv: fromSource ? ['--import', 'tsx'] : [] };
}
