/** `streamstack info` and `--version`: what is installed, and what it runs on; `cluster`: the cluster `--etcd` names. */
import { createRequire } from 'node:module';
import path from 'node:path';
import { loadKernels, readClusterOf, storeFormatVersion } from '@streamstack/engine';
import { type Command, CommanderError } from 'commander';
import { emit } from './io.js';
import { exitUsage } from './shared.js';

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

export function addClusterCommand(program: Command): void {
  program
    .command('cluster')
    .description(
      'the cluster --etcd names, read from etcd without joining it: its nodes (with their addresses) and who writes each leased feed, under which epoch',
    )
    .action(async () => {
      const flags = program.opts<{ etcd?: string; etcdPrefix?: string; etcdNode?: string }>();
      if (flags.etcd === undefined)
        throw new CommanderError(
          exitUsage,
          'streamstack.usage',
          'cluster reads etcd: give --etcd (or STREAMSTACK_ETCD)',
        );
      await emit(
        await readClusterOf({
          etcd: flags.etcd,
          ...(flags.etcdPrefix === undefined ? {} : { prefix: flags.etcdPrefix }),
          ...(flags.etcdNode === undefined ? {} : { node: flags.etcdNode }),
        }),
      );
    });
}
