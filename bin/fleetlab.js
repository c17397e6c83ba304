#!/usr/bin/env node
// Runs the compiled CLI; `npm install` builds it (the `prepare` script).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const compiled = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url));
if (!existsSync(compiled)) {
  console.error('fleetlab: not built yet. Run `npm install` (or `npm run build`) in the fleetlab checkout first.');
  process.exit(1);
}
await import(compiled);
