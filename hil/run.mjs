#!/usr/bin/env node
// `npm run hil`: Playwright Test with the HIL config, selecting the default project (the
// first target, `sim`) unless the arguments name one with --project.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const DEFAULT_PROJECT = process.env.FLEETLAB_HIL_PROJECT ?? 'sim';
const args = process.argv.slice(2);
const named = args.some((a) => a === '--project' || a.startsWith('--project='));
const cli = createRequire(import.meta.url).resolve('@playwright/test/cli');
const config = fileURLToPath(new URL('./playwright.config.ts', import.meta.url));
// One worker for targets that are one device (a board) or take the whole machine (QEMU under TCG).
const projects = named ? args.flatMap((a, i) => (a.startsWith('--project=') ? [a.slice(10)] : a === '--project' ? [args[i + 1]] : [])) : [DEFAULT_PROJECT];
const oneWorker = projects.length > 0 && projects.every((p) => p === 'qemu' || p === 'board') && !args.some((a) => a.startsWith('--workers') || a === '-j');
const argv = [cli, 'test', '-c', config, ...(named ? [] : [`--project=${DEFAULT_PROJECT}`]), ...(oneWorker && !process.env.FLEETLAB_HIL_WORKERS ? ['--workers=1'] : []), ...args];
// Playwright gets SIGINT when this process ends in any way (kill -9 too) and stops the run as on
// Ctrl-C (util-linux's setpriv, as stoppedWithParent in src/processes.ts; without it, as it is).
const setpriv = process.env.PATH?.split(delimiter).map((dir) => join(dir, 'setpriv')).find((p) => existsSync(p));
const child = setpriv ? spawn(setpriv, ['--pdeathsig', 'SIGINT', '--', process.execPath, ...argv], { stdio: 'inherit' }) : spawn(process.execPath, argv, { stdio: 'inherit' });
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
