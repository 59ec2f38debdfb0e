// The test suite compares the native kernels with their TypeScript twins, so it refuses to run
// when the native module is missing: a green run on ts alone would prove nothing about native.
import { createRequire } from 'node:module';

const require = createRequire(new URL('../native/package.json', import.meta.url));
try {
  require('./index.js').crc32(new Uint8Array(1));
} catch (error) {
  console.error(
    'The native module (@streamstack/native) is not built or does not load, so the ' +
      'differential tests cannot run. Run `pnpm build` (or `bash scripts/setup.sh`) first.\n' +
      `Cause: ${error instanceof Error ? error.message : String(error)}`,
  );
  process.exit(1);
}
