/**
 * Whole checks of derived files, made once per file per process. A key or fingerprint
 * dictionary is checked whole (every section's CRC) when a feed opens read-write. Derived files
 * are written once and never changed in place (a rebuild writes a new file and renames it), and
 * a fork holds its source's dictionaries as hard links to the same files: so a check is
 * remembered by the file's identity (device, inode, size and times), and a feed that opens a
 * file already checked, or being checked, in this process takes that check's verdict.
 *
 * @example
 * const reason = await checkWholeOnce(file, () => readEverySection()); // undefined: sound
 */
import fs from 'node:fs/promises';
import { wholeChecksRememberedMax } from '../../limits.js';

/** Verdicts by file identity, oldest first: undefined when sound, else why not. */
const verdicts = new Map<string, Promise<string | undefined>>();

/**
 * The verdict of `check` on `file`, run only if no check of the same file (the same identity)
 * was made, or is under way, in this process. A file that cannot be stat'ed is checked.
 */
export async function checkWholeOnce(
  file: string,
  check: () => Promise<string | undefined>,
): Promise<string | undefined> {
  let identity: string;
  try {
    const stats = await fs.stat(file, { bigint: true });
    identity = [stats.dev, stats.ino, stats.size, stats.mtimeNs, stats.ctimeNs].join(':');
  } catch {
    return check();
  }
  const known = verdicts.get(identity);
  if (known) return known;
  const verdict = check();
  verdicts.set(identity, verdict);
  // A damaged file is replaced by its rebuild: its verdict is not kept for another feed holding
  // it, which checks it itself and rebuilds its own.
  void verdict.then(
    (reason) => {
      if (reason !== undefined) verdicts.delete(identity);
    },
    () => verdicts.delete(identity),
  );
  for (const oldest of verdicts.keys()) {
    if (verdicts.size <= wholeChecksRememberedMax) break;
    verdicts.delete(oldest);
  }
  return verdict;
}
