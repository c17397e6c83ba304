// The config of the failing spec test/timeline-browser.test.ts runs, as a device team writes one.
import { defineConfig } from 'fleetlab/test';

export default defineConfig({
  testDir: new URL('.', import.meta.url).pathname,
  reportDir: process.env.FLEETLAB_TIMELINE_REPORT ?? 'fleetlab-report',
  workers: 1,
  timeline: 'on-failure',
});
