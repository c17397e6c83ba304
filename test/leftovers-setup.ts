/**
 * Runs in each test file's process before the file: its TMPDIR becomes a directory of its own
 * in the run's, so every temporary directory it or a process it starts makes is found by the
 * global teardown and named with this file (test/global-setup.ts).
 */
import { relative } from 'node:path';
import { expect, inject } from 'vitest';
import { makeOwnerDir } from '../hil/lib/run-leftovers.js';

process.env.TMPDIR = makeOwnerDir(inject('fleetlabRunDir'), relative(process.cwd(), expect.getState().testPath ?? 'an unnamed test file'));
