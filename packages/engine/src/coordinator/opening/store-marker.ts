/**
 * A data directory is a StreamStack store or nothing (docs/formats.md, The data directory). A
 * store has a marker, `streamstack.json`, naming its format version: opening a path that is a
 * file, or a directory that holds other things and no marker, is refused before anything is
 * written, so `--data /etc` never becomes `/etc/feeds/…`; a store of a format this version does
 * not know is refused with what it would need.
 *
 * Stores made before the marker existed hold a `feeds` folder and nothing foreign: a read-write
 * open writes their marker, and a read-only open takes them as they are.
 */
import fs from 'node:fs';
import { ioError, StreamStackError } from '../../errors.js';
import { StoreLayout, storeMarkerName, storeRootEntryNames } from '../../storage/feed-layout.js';
import { syncDirectory, writeSmallFileSync } from '../../storage/segment.js';

/** The store format this version writes and reads. */
export const storeFormatVersion = 1;

interface StoreMarker {
  readonly format: number;
}

function refusal(root: string, reason: string, details: Record<string, unknown> = {}): StreamStackError {
  return new StreamStackError('INVALID_ARGUMENT', `${root} is not a StreamStack data directory: ${reason}`, {
    details: { path: root, ...details },
  });
}

/** The marker of the store at `root`, checked; undefined when there is none. */
function readMarker(root: string): StoreMarker | undefined {
  const file = new StoreLayout(root).marker;
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw ioError(error, `cannot read ${file}`);
  }
  let format: unknown;
  try {
    format = (JSON.parse(text) as { format?: unknown }).format;
  } catch {
    format = undefined;
  }
  if (!Number.isSafeInteger(format) || (format as number) < 1) {
    throw new StreamStackError('CORRUPT', `${file} does not name a store format`, { details: { file, offset: 0 } });
  }
  if (format !== storeFormatVersion) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `${root} holds a StreamStack store of format ${String(format)}; this version reads format ${storeFormatVersion}: open it with the version that wrote it`,
      { details: { path: root, format, supported: storeFormatVersion } },
    );
  }
  return { format: format as number };
}

/**
 * Checks that `root` is a store, may become one (a path not there yet, or an empty directory),
 * or is one made before markers; returns whether its marker must still be written. Writes
 * nothing, so a refusal leaves the path as it was.
 */
export function checkDataDirectory(root: string): { markerMissing: boolean } {
  let stats: fs.Stats | undefined;
  try {
    stats = fs.statSync(root, { throwIfNoEntry: false });
  } catch (error) {
    throw ioError(error, `cannot open the data directory ${root}`);
  }
  if (!stats) return { markerMissing: true };
  if (!stats.isDirectory()) throw refusal(root, 'it is a file, not a directory');
  if (readMarker(root)) return { markerMissing: false };
  let entries: string[];
  try {
    entries = fs.readdirSync(root);
  } catch (error) {
    throw ioError(error, `cannot list the data directory ${root}`);
  }
  const foreign = entries.filter((name) => !storeRootEntryNames.has(name));
  if (foreign.length > 0) {
    throw refusal(
      root,
      `it holds ${foreign.length === 1 ? 'a file' : 'files'} of its own (${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', …' : ''}) and no ${storeMarkerName}; give an empty or new directory`,
      {
        entries: foreign.slice(0, 10),
      },
    );
  }
  return { markerMissing: true };
}

/**
 * Writes the marker of the store at `root`, once the directory is locked: under a temporary name,
 * synced, renamed, and the directory synced, so a crash leaves the marker whole or absent.
 */
export async function writeStoreMarker(root: string): Promise<void> {
  const file = new StoreLayout(root).marker;
  const marker: StoreMarker = { format: storeFormatVersion };
  try {
    writeSmallFileSync(file, `${JSON.stringify(marker)}\n`);
    await syncDirectory(root);
  } catch (error) {
    throw ioError(error, `cannot write ${file}`);
  }
}
