/**
 * Chooses the kernel set. `auto` (the default) uses the native module when it loads and the
 * TypeScript twins otherwise; `native` insists on the native module and says why it cannot load.
 * `STREAMSTACK_KERNELS=auto|native|ts` sets the default choice.
 *
 * @example
 * const kernels = loadKernels();          // native when built, else ts
 * kernels.crc32(new TextEncoder().encode('hello')); // 907060870
 */
import { StreamStackError } from '../errors.js';
import type { Kernels } from './kernels.js';
import { loadNativeKernels } from './native.js';
import { tsKernels } from './ts/index.js';

export type { FstEntries, FstRange, Kernels, PackedBytes } from './kernels.js';
export { tsKernels } from './ts/index.js';

export type KernelChoice = 'auto' | 'native' | 'ts';

const kernelChoices: readonly KernelChoice[] = ['auto', 'native', 'ts'];

let nativeKernels: Kernels | undefined;

function parseChoice(choice: string, source: string): KernelChoice {
  if (!(kernelChoices as readonly string[]).includes(choice)) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `${source} must be one of ${kernelChoices.join(', ')}, not ${JSON.stringify(choice)}`,
    );
  }
  return choice as KernelChoice;
}

/** The kernel set for `choice`, or for `STREAMSTACK_KERNELS` (default `auto`) when omitted. */
export function loadKernels(choice?: KernelChoice): Kernels {
  const resolved =
    choice === undefined
      ? parseChoice(process.env.STREAMSTACK_KERNELS ?? 'auto', 'STREAMSTACK_KERNELS')
      : parseChoice(choice, 'the kernel choice');
  if (resolved === 'ts') return tsKernels;
  try {
    nativeKernels ??= loadNativeKernels();
    return nativeKernels;
  } catch (error) {
    if (resolved === 'native') throw error;
    return tsKernels;
  }
}
