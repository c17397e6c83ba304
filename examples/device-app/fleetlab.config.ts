import { defineConfig } from 'fleetlab/test';

export default defineConfig({
  app: './compose.yaml',
});
