/**
 * Runs in each test file's process before the file: its TMPDIR becomes a directory of its own
 * in the run's, so every temporary directory it or a process it starts makes is found by the
 * global teardown and named with this file (test/global-setup.ts).
 *
 * tsx keeps its compile cache in TMPDIR (tsx-<uid>): a directory per file would make every
 * file's first `node --import tsx` child compile the CLI's few hundred modules again (one file
 * of usage errors spent 49 s of CPU in 26 s). The file's tsx-<uid> is a link to the machine's,
 * shared as it is outside the tests; tsx reads a torn entry as a miss.
 */
import { mkdirSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { expect, inject } from 'vitest';
import { makeOwnerDir } from '../hil/lib/run-leftovers.js';

const tsxCache = `tsx-${process.geteuid?.() ?? 0}`;
const shared = join(tmpdir(), tsxCache);
mkdirSync(shared, { recursive: true });
const dir = makeOwnerDir(inject('fleetlabRunDir'), relative(process.cwd(), expect.getState().testPath ?? 'an unnamed test file'));
symlinkSync(shared, join(dir, tsxCache));
process.env.TMPDIR = dir;
