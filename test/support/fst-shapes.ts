/** Shapes of FST inputs that properties count, shared by the FST suites. */

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
