/**
 * Export over HTTP: a feed's range written as NDJSON, Arrow IPC or Parquet files with a manifest,
 * into a directory under the server's export directory (`--exports DIR`). A remote caller names
 * the directory relative to it, and never a path of its own choosing, so an export cannot write
 * anywhere else on the server's disk. Without an export directory the route refuses.
 *
 * A name never passes through a symbolic link: a link placed under the export directory (by
 * whoever can write there) would otherwise carry an export anywhere its target points. Every
 * component that exists already is checked with lstat, so a link is refused, not followed.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { type ExportFormat, type ReadMode, StreamStackError } from '@streamstack/engine';
import type { FastifyInstance } from 'fastify';
import type { ServerContext } from './context.js';
import { exportNameCharactersMax, exportSegmentCharactersMax } from './limits.js';
import { bodyObject } from './routes-feeds.js';
import { exportRange } from './schemas-feeds.js';

/** One to eight path segments of letters, digits, `.`, `_` and `-`, none of them `.` or `..`. */
const exportName = /^(?!.*(?:^|\/)\.\.?(?:\/|$))[A-Za-z0-9._-]+(?:\/[A-Za-z0-9._-]+){0,7}$/;

/** The directory under `root` that `to` names, or `INVALID_ARGUMENT`. */
export function exportDirectoryOf(root: string, to: unknown): string {
  if (typeof to !== 'string' || !exportName.test(to)) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      'to names a directory under the export directory: segments of letters, digits, ".", "_" and "-", no "." or ".."',
      {
        details: { field: 'to' },
      },
    );
  }
  if (
    to.length > exportNameCharactersMax ||
    to.split('/').some((segment) => segment.length > exportSegmentCharactersMax)
  ) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `to is at most ${exportNameCharactersMax} characters, each segment at most ${exportSegmentCharactersMax}`,
      {
        details: {
          field: 'to',
          reason: 'too-long',
          charactersMax: exportNameCharactersMax,
          segmentCharactersMax: exportSegmentCharactersMax,
        },
      },
    );
  }
  return path.join(root, to);
}

/**
 * Refuses `to` when a component of it under `root` that exists is anything but a directory (a
 * symbolic link above all). Components that do not exist yet are made by the export as plain
 * directories. `root` itself is the operator's choice and may be a link: it was resolved once.
 */
export async function checkNoLinks(root: string, to: string): Promise<void> {
  let at = root;
  for (const segment of to.split('/')) {
    at = path.join(at, segment);
    let stat;
    try {
      stat = await fsp.lstat(at);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    if (stat.isSymbolicLink()) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `to passes through a symbolic link (${path.relative(root, at)}): exports are never written through links`,
        {
          details: { field: 'to', reason: 'symlink' },
        },
      );
    }
    if (!stat.isDirectory()) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `to passes through ${path.relative(root, at)}, which is not a directory`,
        { details: { field: 'to', reason: 'not-a-directory' } },
      );
    }
  }
}

function noExportDirectory(): StreamStackError {
  return new StreamStackError(
    'INVALID_ARGUMENT',
    'this server has no export directory (streamstack serve --exports DIR)',
  );
}

export function addExportRoutes(app: FastifyInstance, ctx: ServerContext, exportRoot: string | undefined): void {
  app.post<{ Params: { feed: string } }>(
    '/v1/feeds/:feed/export',
    {
      config: { operation: 'admin' },
      schema: exportRange,
      // Before the body is validated: a server without exports refuses every export the same way.
      preValidation: async () => {
        if (exportRoot === undefined) throw noExportDirectory();
      },
    },
    async (request) => {
      if (exportRoot === undefined) throw noExportDirectory();
      const { format, to, after, upTo, mode } = bodyObject(request.body);
      const directory = exportDirectoryOf(exportRoot, to);
      const feed = await ctx.feed(request.params.feed);
      await checkNoLinks(exportRoot, to as string);
      const manifest = await feed.export({
        format: format as ExportFormat,
        to: directory,
        ...(after === undefined ? {} : { after: after as number }),
        ...(upTo === undefined ? {} : { upTo: upTo as number }),
        ...(mode === undefined ? {} : { mode: mode as ReadMode }),
      });
      return manifest;
    },
  );
}
