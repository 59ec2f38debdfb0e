import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // Tests run against the engine's and the protocol's source, so a test run never depends on a
    // stale build. The engine and the client both import the protocol: one alias makes them share
    // one module, so `instanceof StreamStackError` holds across them as it does when installed.
    alias: {
      '@streamstack/protocol': fileURLToPath(new URL('./packages/protocol/src/index.ts', import.meta.url)),
      '@streamstack/engine': fileURLToPath(new URL('./packages/engine/src/index.ts', import.meta.url)),
    },
  },
  test: {
    include: ['packages/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    globalSetup: ['./test/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
