// Checked once per test run, in case vitest is started directly rather than through `pnpm test`:
// the differential suites need both kernel sets, and must not quietly run on one.
import { loadKernels } from '../packages/engine/src/kernels/index.js';

export default function setup(): void {
  loadKernels('native');
}
