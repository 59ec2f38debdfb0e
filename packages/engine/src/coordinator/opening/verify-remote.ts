/**
 * `verify` of a tiered feed's object storage: every segment the tiering log says is visible
 * remotely has its descriptor there, naming this segment (its base and fingerprint), and every
 * object the descriptor names has the size it says and the CRC of each of its blocks, read back
 * a block at a time through `RemoteSegmentFile`, as every remote read is checked. A missing or damaged object is `CORRUPT` naming the object, as damage to a
 * local file names the file.
 */
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { tieringBlockBytes } from '../../limits.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import { BlockCache, RemoteSegmentFile } from '../../storage/remote-segment-file.js';
import {
  decodeDescriptor,
  feedObjectPrefix,
  objectFolders,
  ordinalName,
  segmentObjectName,
} from '../../storage/segment-descriptor.js';
import { isVisibleRemotely, TieringLog } from '../maintenance/tiering-state.js';
import { feedTagOf } from './data-directory.js';

/** How verify reports a problem: its code, its message, and where. */
type Report = (code: 'CORRUPT' | 'ERROR', message: string, where?: { file?: string }) => void;

/**
 * Checks the remote copies of the feed in `directory` against their descriptors; returns how
 * many segments it checked (undefined for a feed never tiered).
 */
export async function verifyRemote(
  kernels: Kernels,
  feed: string,
  directory: string,
  objectStore: ObjectSegmentStore,
  report: Report,
  onBytes: (bytes: number) => void = () => undefined,
): Promise<number | undefined> {
  const log = await TieringLog.open(kernels, directory, true);
  try {
    if (!log.written) return undefined;
    const state = log.stateOr(() => '');
    const root = objectStore.within(feedObjectPrefix(feed, feedTagOf(directory)));
    const descriptors = root.within(objectFolders.descriptors);
    const segments = root.within(objectFolders.segments);
    let checked = 0;
    // Two blocks: the one being checked and the one fetched ahead of it.
    const cache = new BlockCache(2 * tieringBlockBytes);
    for (const entry of state.entries) {
      if (!isVisibleRemotely(entry)) continue;
      checked++;
      const name = ordinalName(entry.ordinal);
      const where = { file: descriptors.prefix + name };
      try {
        const descriptor = decodeDescriptor(
          (await descriptors.readStart(name, Number.POSITIVE_INFINITY)).bytes,
          descriptors.prefix + name,
        );
        if (descriptor.base !== entry.base || descriptor.source !== entry.source || descriptor.retired) {
          report('CORRUPT', `${where.file} describes another segment than the one at ${entry.base}`, where);
          continue;
        }
        for (const file of descriptor.files) {
          const object = segmentObjectName(descriptor.ordinal, file.name);
          const size = await segments.size(object);
          if (size !== file.bytes) {
            report(
              'CORRUPT',
              `${segments.prefix}${object} ${size === undefined ? 'is missing' : `holds ${size} bytes, not ${file.bytes}`}`,
              { file: segments.prefix + object },
            );
            continue;
          }
          // Read in order through the same checked block reads as any remote read (the next
          // block comes ahead); the first block that fails its CRC is reported, and the file left.
          const reader = new RemoteSegmentFile(kernels, segments, descriptor, file.name, cache);
          try {
            for (let offset = 0; offset < file.bytes; offset += descriptor.blockBytes) {
              const length = Math.min(descriptor.blockBytes, file.bytes - offset);
              await reader.read(offset, length);
              onBytes(length);
            }
          } catch (error) {
            if (!(error instanceof StreamStackError && error.code === 'CORRUPT')) throw error;
            report('CORRUPT', error.message, { file: segments.prefix + object });
          }
        }
      } catch (error) {
        const missing = error instanceof StreamStackError && error.details?.errno === 'ENOENT';
        const code = missing || (error instanceof StreamStackError && error.code === 'CORRUPT') ? 'CORRUPT' : 'ERROR';
        report(
          code,
          missing ? `${where.file} is missing` : error instanceof Error ? error.message : String(error),
          where,
        );
      }
    }
    return checked;
  } finally {
    log.close();
  }
}
