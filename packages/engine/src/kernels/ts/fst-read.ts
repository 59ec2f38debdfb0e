/**
 * Reads FST maps in the Rust `fst` crate's format (see fst-format.ts): point lookups, batched
 * lookups, the key count, and checksum verification. Range scans are in fst-range.ts.
 *
 * Files may be garbage. The readers read exactly the bytes the crate's reader reads and fail
 * (`CORRUPT`) exactly where it would panic, which the native twin turns into `CORRUPT`; so the two
 * agree on corrupt files too, and neither reads outside the file. A lookup takes one step per key
 * byte, so it ends however the nodes point.
 */
import { StreamStackError } from '../../errors.js';
import type { PackedBytes } from '../kernels.js';
import { crc32c } from './crc.js';
import {
  commonInputByIndex,
  emptyFinalAddress,
  fstChecksumBytes,
  fstFirstVersionWithChecksum,
  fstFirstVersionWithTransitionIndex,
  fstFooterBytesWithoutChecksum,
  fstFormatVersion,
  fstHeaderBytes,
  fstMinimumBytes,
  fstOldestReadableVersion,
  maskChecksum,
  maxTransitionsPerNode,
  packedIntegerMaxBytes,
  stateFinalFlag,
  stateLowBitsMask,
  stateOneTransition,
  stateOneTransitionNext,
  transitionIndexBytes,
  transitionIndexThreshold,
} from './fst-format.js';

/** What `lookupValue` returns for a key that is not in the map (values are never negative). */
const absentValue = -1;

/** 2^32 as a double, to join the halves of 64-bit integers. */
const twoToThe32 = 0x1_0000_0000;

/** Deltas of up to this many bytes are below 2^48, exact in a double whatever their bytes. */
const safeDeltaBytes = 6;

/** The high half of a u64 must stay below this for the whole to be a safe integer (< 2^53). */
const safeIntegerHighLimit = 0x20_0000;

/** The error for a file that does not hold together. */
export function corrupt(message: string, details: Record<string, unknown> = {}): StreamStackError {
  return new StreamStackError('CORRUPT', `FST is corrupt: ${message}`, { details });
}

/**
 * A sum of outputs past 2^53 - 1: only a corrupt file has one, since every value was a safe integer
 * when it was built. Checked after every addition, as the native twin does, so both fail alike.
 */
export function unsafeValue(): StreamStackError {
  return corrupt('a value is not a safe integer');
}

/** A little-endian u64 at `offset` as a number, or -1 when it is not a safe integer. */
function readU64(bytes: Uint8Array, offset: number): number {
  const low = readPacked(bytes, offset, 4);
  const high = readPacked(bytes, offset + 4, 4);
  return high >= safeIntegerHighLimit ? -1 : high * twoToThe32 + low;
}

/**
 * An unsigned integer of `size` bytes (1 to 8), little endian, at `offset`. The common sizes of one
 * to four bytes are read with integer operations; a loop of double multiplications, the general
 * case, costs several times more and these reads are a large share of every lookup.
 */
export function readPacked(bytes: Uint8Array, offset: number, size: number): number {
  if (size === 1) return bytes[offset];
  if (size === 2) return bytes[offset] | (bytes[offset + 1] << 8);
  const low24 = bytes[offset] | (bytes[offset + 1] << 8) | (bytes[offset + 2] << 16);
  if (size === 3) return low24;
  const low = (low24 | (bytes[offset + 3] << 24)) >>> 0;
  if (size === 4) return low;
  let high = 0;
  let scale = 1;
  for (let index = 4; index < size; index++) {
    high += bytes[offset + index] * scale;
    scale *= 256;
  }
  return high * twoToThe32 + low;
}

/**
 * Checks what the crate checks when it opens a file (size, version) and, more strictly than it,
 * that the key count is a safe integer and the root is the last node before the footer, as the
 * builder always leaves it. The native twin's `open` checks exactly the same. Returns
 * the root address; the version is then `fst[0]` and the key count `footerKeyCount(fst)`. (No
 * header object: a point lookup would spend a noticeable share of its time allocating it.)
 */
export function openFst(fst: Uint8Array): number {
  if (fst.length < fstMinimumBytes) {
    throw corrupt(`${fst.length} bytes is shorter than the smallest FST (${fstMinimumBytes})`, {
      bytes: fst.length,
    });
  }
  const version = readU64(fst, 0);
  if (version < fstOldestReadableVersion || version > fstFormatVersion) {
    throw corrupt(`unknown format version ${version}`, { version });
  }
  const nodesEnd = nodesEndOf(fst, version);
  if (readU64(fst, nodesEnd) < 0) throw corrupt('the key count is not a safe integer');
  const rootAddress = readU64(fst, nodesEnd + 8);
  const rootIsSound =
    rootAddress === emptyFinalAddress
      ? nodesEnd === fstHeaderBytes
      : rootAddress === nodesEnd - 1 && rootAddress >= fstHeaderBytes;
  if (!rootIsSound) {
    throw corrupt(`root address ${rootAddress} does not end the node region`, {
      rootAddress,
      nodesEnd,
    });
  }
  return rootAddress;
}

/** Where the footer starts; in a sound file every node lies in [fstHeaderBytes, nodesEnd). */
function nodesEndOf(fst: Uint8Array, version: number): number {
  const checksumBytes = version >= fstFirstVersionWithChecksum ? fstChecksumBytes : 0;
  return fst.length - checksumBytes - fstFooterBytesWithoutChecksum;
}

/** The key count in the footer of an FST that `openFst` accepted (which checked it is safe). */
export function footerKeyCount(fst: Uint8Array): number {
  return readU64(fst, nodesEndOf(fst, fst[0]));
}

/** A transition to an address outside the file (or, wrapped past zero, before it). */
function addressOutside(data: Uint8Array, address: number): StreamStackError {
  return corrupt(`a transition points to ${address}, outside the ${data.length} bytes`, {
    address,
  });
}

/**
 * A node whose bytes the crate could not read: a position before the start of the file or past the
 * node's own last byte, or a pack size it asserts against. The crate panics there, and the native
 * twin turns the panic into CORRUPT.
 */
export function malformedNode(address: number): StreamStackError {
  return corrupt(`malformed node at ${address}`, { address });
}

/**
 * Does what the crate's `Node::new` does before anything asks the node a question, so a corrupt
 * node fails here exactly when it fails there: the address must be in the file (0 is the empty
 * final node, which has no bytes), and the node's pack sizes (and, for a final node with outputs,
 * its final output) must lie between the file's start and the node's state byte. Nodes may lie
 * anywhere in the file, the header and footer included, as far as the crate is concerned.
 */
export function checkNode(data: Uint8Array, version: number, address: number): void {
  if (address === emptyFinalAddress) return;
  if (!(address > emptyFinalAddress && address < data.length)) throw addressOutside(data, address);
  const state = data[address];
  const tag = state >>> 6;
  const lowBits = state & stateLowBitsMask;
  if (tag === stateOneTransitionNext) return;
  if (tag === stateOneTransition) {
    if (address - (lowBits !== 0 ? 0 : 1) - 1 < 0) throw malformedNode(address);
    return;
  }
  const sizesAt = address - (lowBits !== 0 ? 0 : 1) - 1;
  if (sizesAt < 0) throw malformedNode(address);
  const outputSize = data[sizesAt] & 0x0f;
  if ((state & stateFinalFlag) === 0 || outputSize === 0) return;
  const finalAt = finalOutputAt(data, version, address, state, sizesAt);
  if (finalAt < 0 || outputSize > packedIntegerMaxBytes) throw malformedNode(address);
}

/** The transition count of an "any transitions" node; 1 in the count byte stands for 256. */
export function anyNodeTransitionCount(data: Uint8Array, address: number, state: number): number {
  const inState = state & stateLowBitsMask;
  if (inState !== 0) return inState;
  const count = data[address - 1];
  return count === 1 ? maxTransitionsPerNode : count;
}

/** Bytes of the transition index of an "any transitions" node with `count` transitions. */
export function transitionIndexBytesOf(version: number, count: number): number {
  const indexed = version >= fstFirstVersionWithTransitionIndex && count > transitionIndexThreshold;
  return indexed ? transitionIndexBytes : 0;
}

/** Where the final output of an "any transitions" node starts (negative when it cannot). */
function finalOutputAt(data: Uint8Array, version: number, address: number, state: number, sizesAt: number): number {
  const count = anyNodeTransitionCount(data, address, state);
  const sizes = data[sizesAt];
  const indexBytes = transitionIndexBytesOf(version, count);
  const outputSize = sizes & 0x0f;
  return sizesAt - indexBytes - count * (1 + (sizes >>> 4) + outputSize) - outputSize;
}

/** The final output of the node at `address` (0 unless it is a final "any" node with outputs). */
export function finalOutputOf(data: Uint8Array, version: number, address: number): number {
  if (address === emptyFinalAddress) return 0;
  const state = data[address];
  if (state >>> 6 >= stateOneTransition || (state & stateFinalFlag) === 0) return 0;
  const sizesAt = address - ((state & stateLowBitsMask) !== 0 ? 0 : 1) - 1;
  const outputSize = data[sizesAt] & 0x0f;
  if (outputSize === 0) return 0;
  return readPacked(data, finalOutputAt(data, version, address, state, sizesAt), outputSize);
}

/**
 * The target of a transition whose delta is the `size` bytes at `deltaAt`, in a node whose first
 * byte is `nodeStart`. Zero means the empty final node. Otherwise the crate subtracts in u64 and
 * wraps, so a delta past `nodeStart` lands at 2^64 minus something (a negative number here, past
 * the end of any file there), and a delta near 2^64 wraps back into the file; for deltas of 2^53
 * and more, computed on 32-bit halves to stay exact.
 */
export function transitionTarget(data: Uint8Array, deltaAt: number, size: number, nodeStart: number): number {
  if (size <= safeDeltaBytes) {
    const delta = readPacked(data, deltaAt, size);
    return delta === 0 ? emptyFinalAddress : nodeStart - delta;
  }
  const low = readPacked(data, deltaAt, 4);
  const high = readPacked(data, deltaAt + 4, size - 4);
  if (high === 0 && low === 0) return emptyFinalAddress;
  if (high < safeIntegerHighLimit) return nodeStart - (high * twoToThe32 + low);
  // nodeStart - delta mod 2^64 = nodeStart + (2^64 - delta), exact whenever it could be in a file.
  return nodeStart + ((twoToThe32 - high) * twoToThe32 - low);
}

/**
 * The value of `key[start, end)` in the FST, or `absentValue`. It reads what the crate's
 * `Node::find_input` and `Node::transition` read, and fails where they would panic, so it agrees
 * with the native twin even on corrupt bytes. Nodes are decoded in place, without a cursor object,
 * because this is the hot path of every lookup.
 */
function lookupValue(
  data: Uint8Array,
  version: number,
  rootAddress: number,
  key: Uint8Array,
  start: number,
  end: number,
): number {
  const length = data.length;
  let address = rootAddress;
  let total = 0;
  for (let position = start; position < end; position++) {
    // What `Node::new` checks is checked here, on the node about to be searched, rather than by a
    // call to `checkNode`, to read its state byte once.
    if (address === emptyFinalAddress) return absentValue;
    if (!(address > emptyFinalAddress && address < length)) throw addressOutside(data, address);
    const input = key[position];
    const state = data[address];
    const tag = state >>> 6;
    const lowBits = state & stateLowBitsMask;
    // Where a one-transition node keeps its input when it is not a common one.
    const inputAt = lowBits !== 0 ? address : address - 1;
    if (tag === stateOneTransitionNext) {
      // One transition, no output, to the node just below this one.
      const nodeInput = lowBits !== 0 ? commonInputByIndex[lowBits - 1] : data[inputAt];
      if (nodeInput !== input) return absentValue;
      address = inputAt - 1;
    } else if (tag === stateOneTransition) {
      const sizesAt = inputAt - 1;
      if (sizesAt < 0) throw malformedNode(address);
      const nodeInput = lowBits !== 0 ? commonInputByIndex[lowBits - 1] : data[inputAt];
      if (nodeInput !== input) return absentValue;
      const sizes = data[sizesAt];
      const deltaSize = sizes >>> 4;
      const outputSize = sizes & 0x0f;
      const deltaAt = sizesAt - deltaSize;
      const nodeStart = deltaAt - outputSize;
      if (outputSize !== 0) {
        if (outputSize > packedIntegerMaxBytes || nodeStart < 0) throw malformedNode(address);
        total += readPacked(data, nodeStart, outputSize);
        if (total > Number.MAX_SAFE_INTEGER) throw unsafeValue();
      }
      if (deltaSize === 0 || deltaSize > packedIntegerMaxBytes || deltaAt < 0) {
        throw malformedNode(address);
      }
      address = transitionTarget(data, deltaAt, deltaSize, nodeStart);
    } else {
      const sizesAt = inputAt - 1;
      if (sizesAt < 0) throw malformedNode(address);
      const count = lowBits !== 0 ? lowBits : anyNodeTransitionCount(data, address, state);
      const sizes = data[sizesAt];
      const deltaSize = sizes >>> 4;
      const outputSize = sizes & 0x0f;
      const isFinal = (state & stateFinalFlag) !== 0;
      const indexBytes = transitionIndexBytesOf(version, count);
      // The inputs end where the index (or the pack sizes) begin; they run last transition first.
      const inputsEnd = sizesAt - indexBytes;
      const deltasEnd = inputsEnd - count;
      const outputsEnd = deltasEnd - count * deltaSize;
      const nodeStart = outputsEnd - count * outputSize - (isFinal ? outputSize : 0);
      const finalOutputUnreadable = nodeStart < 0 || outputSize > packedIntegerMaxBytes;
      if (isFinal && outputSize !== 0 && finalOutputUnreadable) throw malformedNode(address);
      let found = -1;
      if (indexBytes !== 0) {
        if (inputsEnd + input < 0) throw malformedNode(address);
        const slot = data[inputsEnd + input];
        if (slot >= count) return absentValue;
        // The crate then reads the transition's input too.
        if (inputsEnd - 1 - slot < 0) throw malformedNode(address);
        found = slot;
      } else {
        if (deltasEnd < 0) throw malformedNode(address);
        for (let at = deltasEnd; at < inputsEnd; at++) {
          if (data[at] === input) {
            found = inputsEnd - 1 - at;
            break;
          }
        }
        if (found < 0) return absentValue;
      }
      if (outputSize !== 0) {
        const outputAt = outputsEnd - (found + 1) * outputSize;
        if (outputSize > packedIntegerMaxBytes || outputAt < 0) throw malformedNode(address);
        total += readPacked(data, outputAt, outputSize);
        if (total > Number.MAX_SAFE_INTEGER) throw unsafeValue();
      }
      const deltaAt = deltasEnd - (found + 1) * deltaSize;
      if (deltaSize === 0 || deltaSize > packedIntegerMaxBytes || deltaAt < 0) {
        throw malformedNode(address);
      }
      address = transitionTarget(data, deltaAt, deltaSize, nodeStart);
    }
  }
  checkNode(data, version, address);
  if (!isFinalNode(data, address)) return absentValue;
  total += finalOutputOf(data, version, address);
  if (total > Number.MAX_SAFE_INTEGER) throw unsafeValue();
  return total;
}

/** Whether the node at `address` ends a key: the empty final node, or an "any" node so marked. */
export function isFinalNode(data: Uint8Array, address: number): boolean {
  if (address === emptyFinalAddress) return true;
  const state = data[address];
  return state >>> 6 < stateOneTransition && (state & stateFinalFlag) !== 0;
}

/** Throws `CORRUPT` unless the FST's header, footer and checksum hold. */
export function fstVerify(fst: Uint8Array): void {
  openFst(fst);
  const version = fst[0];
  if (version < fstFirstVersionWithChecksum) {
    throw corrupt(`format version ${version} has no checksum`, { version });
  }
  const checksumAt = fst.length - fstChecksumBytes;
  const expected = readPacked(fst, checksumAt, fstChecksumBytes);
  const actual = maskChecksum(crc32c(fst.subarray(0, checksumAt)));
  if (expected !== actual) throw corrupt('checksum mismatch', { expected, actual });
}

/** Number of keys in the FST, from its footer. */
export function fstLength(fst: Uint8Array): number {
  openFst(fst);
  return footerKeyCount(fst);
}

/** The value stored for `key`, or undefined. */
export function fstGet(fst: Uint8Array, key: Uint8Array): number | undefined {
  const rootAddress = openFst(fst);
  const version = fst[0];
  const value = lookupValue(fst, version, rootAddress, key, 0, key.length);
  return value === absentValue ? undefined : value;
}

/** The values of many keys in one call; -1 marks a key that is absent. */
export function fstGetMany(fst: Uint8Array, keys: PackedBytes): Float64Array {
  const rootAddress = openFst(fst);
  const version = fst[0];
  const { bytes, ends } = keys;
  // All offsets are checked before any look-up, as the native twin does, so that when both the
  // keys and the FST are bad both report the same code.
  let start = 0;
  for (let index = 0; index < ends.length; index++) {
    const end = ends[index];
    if (end < start || end > bytes.length) {
      throw new StreamStackError('INVALID_ARGUMENT', `fstGetMany key ${index} ends at ${end}, outside its buffer`, {
        details: { index, end, start, bytes: bytes.length },
      });
    }
    start = end;
  }
  const values = new Float64Array(ends.length);
  start = 0;
  for (let index = 0; index < ends.length; index++) {
    const end = ends[index];
    values[index] = lookupValue(fst, version, rootAddress, bytes, start, end);
    start = end;
  }
  return values;
}
