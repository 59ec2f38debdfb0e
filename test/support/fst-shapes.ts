/** What the FST suites share: the shapes of inputs they count, and the reader's rejections. */

/**
 * The most transitions out of any node of the FST of `keys` (sorted and unique): the trie's
 * fan-out, found in one pass with a stack of per-depth counts. Nodes with more than 32
 * transitions carry the 256-byte transition index, a layout of their own.
 */
export function widestNode(keys: readonly Uint8Array[]): number {
  const fanOut: number[] = [];
  let widest = 0;
  let previous: Uint8Array | undefined;
  for (const key of keys) {
    let shared = 0;
    if (previous) while (shared < previous.length && shared < key.length && previous[shared] === key[shared]) shared++;
    fanOut.length = Math.min(fanOut.length, shared + 1);
    if (key.length > shared) {
      fanOut[shared] = (previous && shared < fanOut.length ? fanOut[shared] : 0) + 1;
      widest = Math.max(widest, fanOut[shared]);
      for (let depth = shared + 1; depth < key.length; depth++) fanOut[depth] = 1;
    }
    previous = key;
  }
  return widest;
}

/** The ts reader's reasons for refusing an FST (by words of its messages), as branch names. */
export const fstRejections = [
  ['shorter than the smallest FST', 'shorter than the 36-byte guard'],
  ['unknown format version', 'unknown format version'],
  ['key count is not a safe integer', 'key count not a safe integer'],
  ['does not end the node region', 'root does not end the node region'],
  ['checksum mismatch', 'checksum mismatch'],
  ['has no checksum', 'version without a checksum'],
  ['malformed node', 'malformed node'],
  ['outside the', 'transition outside the file'],
  ['not to a lower address', 'transition not to a lower address'],
  ['a value is not a safe integer', 'value not a safe integer'],
  ['found no keys where the file promises some', 'range scan ran out of steps'],
] as const;

export type FstRejection = (typeof fstRejections)[number][1];

/** The rejection an FST reader's error message names, or undefined for any other message. */
export function fstRejectionIn(message: string): FstRejection | undefined {
  return fstRejections.find(([text]) => message.includes(text))?.[1];
}
