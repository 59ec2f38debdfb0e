/**
 * An export's manifest (docs/formats.md, Export manifest): `manifest.json` beside the files,
 * written last, saying what range of which feed the files hold, in which mode and format, how
 * many records, each file's SHA-256, the columns, and the StreamStack version that wrote them.
 * It holds no clock time, so the same export gives the same manifest, byte for byte; and its
 * `upTo` is where the next export of the feed continues (`after: manifest.upTo`).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { ExportedFile, ExportFormat, ExportManifest } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';

export type { ExportedFile, ExportFormat, ExportManifest };

/**
 * The manifest's file name, and its format version: a change to its fields, or to the columns
 * of the files it describes, needs a new one. Version 2 gave every file of a format the same
 * columns (a nullable `payloadText` in Arrow and Parquet files, `payload` and `payloadBase64` per
 * record in NDJSON lines) and `columns` each format's own; in version 1, files whose payloads
 * were not all text had no text payload column.
 */
export const manifestName = 'manifest.json';
export const manifestVersion = 2;

/**
 * The manifest versions read back (to continue an export, or verify one): what those use
 * (`upTo`, `mode`, `format`, `files`' sizes and hashes) is the same in both.
 */
const manifestVersionsRead: readonly number[] = [1, 2];

let version: string | undefined;

/** The engine's version, from its package.json (the same file in the sources and the build). */
export function streamstackVersion(): string {
  version ??= (
    JSON.parse(fs.readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }
  ).version;
  return version;
}

/** The manifest as its file holds it: fields in a fixed order, two-space indented, one newline. */
export function manifestBytes(manifest: ExportManifest): Uint8Array {
  return new TextEncoder().encode(`${JSON.stringify(manifest, null, 2)}\n`);
}

/** Reads the manifest of the export in `directory`; `INVALID_ARGUMENT` when there is none. */
export async function readExportManifest(directory: string): Promise<ExportManifest> {
  let text: string;
  try {
    text = await fsp.readFile(path.join(directory, manifestName), 'utf8');
  } catch (error) {
    throw new StreamStackError('INVALID_ARGUMENT', `${directory} holds no export manifest (${manifestName})`, {
      cause: error,
      details: { directory },
    });
  }
  let manifest: ExportManifest;
  try {
    manifest = JSON.parse(text) as ExportManifest;
  } catch (error) {
    throw new StreamStackError('CORRUPT', `the export manifest in ${directory} is not valid JSON`, {
      cause: error,
      details: { directory },
    });
  }
  if (
    !manifestVersionsRead.includes(manifest.manifestVersion) ||
    !Array.isArray(manifest.files) ||
    !Number.isSafeInteger(manifest.upTo)
  ) {
    throw new StreamStackError(
      'CORRUPT',
      `the export manifest in ${directory} is not a version ${manifestVersionsRead.join(' or ')} manifest`,
      { details: { directory } },
    );
  }
  return manifest;
}

/**
 * Checks every file the manifest in `directory` names against its size and SHA-256: the problems
 * found (empty when the export is whole).
 */
export async function verifyExport(directory: string): Promise<{ manifest: ExportManifest; problems: string[] }> {
  const manifest = await readExportManifest(directory);
  const problems: string[] = [];
  for (const file of manifest.files) {
    let bytes: Buffer;
    try {
      bytes = await fsp.readFile(path.join(directory, file.name));
    } catch {
      problems.push(`${file.name} is missing`);
      continue;
    }
    if (bytes.length !== file.bytes)
      problems.push(`${file.name} has ${bytes.length} bytes, the manifest says ${file.bytes}`);
    else if (crypto.createHash('sha256').update(bytes).digest('hex') !== file.sha256)
      problems.push(`${file.name} does not match its SHA-256`);
  }
  return { manifest, problems };
}
