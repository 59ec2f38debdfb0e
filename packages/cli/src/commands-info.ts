/** `streamstack info` and `--version`: what is installed, and what it runs on. */
import { createRequire } from 'node:module';
import path from 'node:path';
import { loadKernels, storeFormatVersion } from '@streamstack/engine';
import type { Command } from 'commander';
import { emit } from './io.js';

/** The version of this package, from its package.json (shipped beside `dist`). */
export const cliVersion: string = (createRequire(import.meta.url)('../package.json') as { version: string }).version;

export function addInfoCommand(program: Command): void {
  program
    .command('info')
    .description(
      'the version, the kernels that load here (native or ts, and why not native), the store format, the data directory',
    )
    .action(async () => {
      const { data } = program.opts<{ data: string }>();
      const kernels = loadKernels();
      // Why the native kernels did not load, when they did not: `auto` fell back to the twins.
      let nativeUnavailable: string | undefined;
      if (kernels.name !== 'native') {
        try {
          loadKernels('native');
        } catch (error) {
          nativeUnavailable = error instanceof Error ? error.message : String(error);
        }
      }
      await emit({
        version: cliVersion,
        node: process.versions.node,
        kernels: kernels.name,
        ...(nativeUnavailable === undefined ? {} : { nativeUnavailable }),
        storeFormat: storeFormatVersion,
        data: path.resolve(data),
      });
    });
}
