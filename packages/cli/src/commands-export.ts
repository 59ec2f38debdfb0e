/** The `export` command: a range of a feed to NDJSON, Arrow IPC or Parquet files with a manifest. */

import { type ExportFormat, type ReadMode, readExportManifest, readModes, StreamStackError } from '@streamstack/engine';
import { type Command, Option } from 'commander';
import { emit } from './io.js';
import { quietOption, withProgress } from './progress.js';
import { integer, openFeed, withStore } from './shared.js';

interface ExportFlags {
  format?: ExportFormat;
  out: string;
  after?: number;
  upTo?: number;
  mode?: ReadMode;
  continue?: string;
  quiet?: boolean;
}

export function addExportCommand(program: Command): void {
  program
    .command('export <feed>')
    .description(
      'write a range of the feed to NDJSON, Arrow IPC or Parquet files in a directory, with a manifest; prints the manifest summary',
    )
    .addOption(new Option('--format <format>', 'file format').choices(['ndjson', 'arrow', 'parquet']))
    .requiredOption('--out <dir>', 'directory for the files and manifest.json (created; must not hold an export)')
    .option('--after <commit>', 'export the commits after this one (default 0, the start)', integer('--after'))
    .option('--up-to <commit>', 'export up to this commit (default: the head)', integer('--up-to'))
    .addOption(new Option('--mode <mode>', 'read mode (default raw)').choices(readModes))
    .option(
      '--continue <dir>',
      "continue the export in this directory: after its manifest's upTo, in its mode and format",
    )
    .addOption(quietOption())
    .action((feedName: string, flags: ExportFlags) =>
      withStore(
        program,
        async (store) => {
          const feed = await openFeed(store, feedName);
          let { after, mode, format } = flags;
          if (flags.continue !== undefined) {
            const previous = await readExportManifest(flags.continue);
            const clash = [
              previous.feed !== feedName && `it exports feed ${previous.feed}`,
              after !== undefined && after !== previous.upTo && `--after ${after} is not its upTo ${previous.upTo}`,
              mode !== undefined && mode !== previous.mode && `--mode ${mode} is not its mode ${previous.mode}`,
              format !== undefined &&
                format !== previous.format &&
                `--format ${format} is not its format ${previous.format}`,
            ].filter(Boolean);
            if (clash.length > 0) {
              throw new StreamStackError(
                'INVALID_ARGUMENT',
                `cannot continue the export in ${flags.continue}: ${clash.join('; ')}`,
                { details: { continue: flags.continue } },
              );
            }
            ({ upTo: after, mode, format } = previous);
          }
          if (format === undefined)
            throw new StreamStackError(
              'INVALID_ARGUMENT',
              'export needs --format ndjson, arrow or parquet (or --continue DIR)',
            );
          // The bar counts each record half when it is read and half once its file is written,
          // so it reaches 100% with the manifest, not when the reading ends.
          const manifest = await withProgress('export', flags.quiet, (onProgress) =>
            feed.export({
              format,
              to: flags.out,
              mode: mode ?? 'raw',
              ...(after === undefined ? {} : { after }),
              ...(flags.upTo === undefined ? {} : { upTo: flags.upTo }),
              ...(onProgress ? { onProgress } : {}),
            }),
          );
          await emit({
            feed: manifest.feed,
            out: flags.out,
            format: manifest.format,
            mode: manifest.mode,
            after: manifest.after,
            upTo: manifest.upTo,
            records: manifest.records,
            files: manifest.files.length,
            bytes: manifest.files.reduce((total, file) => total + file.bytes, 0),
          });
        },
        'read',
      )(),
    );
}
