/**
 * The byte format of the Rust `fst` crate (0.4.7), shared by the TypeScript builder and reader.
 *
 * An FST file is a 16-byte header (u64 version, u64 type), then the compiled nodes, then a footer
 * (u64 key count, u64 root address and, from version 3 on, a u32 masked CRC-32C of everything
 * before it). All integers are little endian. Nodes are written after the nodes they point to, and
 * a node's address is the position of its last byte (its state byte): a reader starts there and
 * decodes backwards. Transitions store their target as a distance back from the node's first byte.
 *
 * The state byte's top two bits say which of three layouts the node uses:
 * - `11` one transition to the node written just before this one, with no output;
 * - `10` one transition with an explicit target and output;
 * - `0f` any number of transitions, where `f` is the final flag.
 * A final node with no transitions and no output is never written: it has the reserved address 0.
 */

/** The format version the crate writes and the newest it reads. Format. */
export const fstFormatVersion = 3;

/** The oldest format version the crate still reads (version 1 lacks the transition index). */
export const fstOldestReadableVersion = 1;

/** The first version with the 256-byte transition index in large nodes. Format. */
export const fstFirstVersionWithTransitionIndex = 2;

/** The first version with a checksum at the end of the file. Format. */
export const fstFirstVersionWithChecksum = 3;

/** The FST type the crate's `MapBuilder` writes into the header (it reserves 0-255). Format. */
export const fstMapType = 0;

/** Bytes of the header: u64 version and u64 type. The builder writes no node below it. */
export const fstHeaderBytes = 16;

/** Bytes of the footer without the checksum: u64 key count and u64 root address. Format. */
export const fstFooterBytesWithoutChecksum = 16;

/** Bytes of the checksum at the very end of a version 3 file. Format. */
export const fstChecksumBytes = 4;

/**
 * The smallest file the crate opens: header, footer and checksum around an empty node region.
 * It is exactly the size of a map holding only the empty key with value 0.
 */
export const fstMinimumBytes = fstHeaderBytes + fstFooterBytesWithoutChecksum + fstChecksumBytes;

/**
 * The address of the "final leaf with no output" node, which is never written out: every key's
 * last node is usually one, so sharing a sentinel for it saves a byte per key. Format.
 */
export const emptyFinalAddress = 0;

/** A sentinel the builder uses for "no address yet"; no node can live there (it is header). */
export const noAddress = 1;

/**
 * Nodes with more transitions than this carry a 256-byte table from input byte to transition
 * index, so a lookup in a wide node is one load rather than a scan. Format.
 */
export const transitionIndexThreshold = 32;

/** Bytes of the transition index table: one per possible input byte. Format. */
export const transitionIndexBytes = 256;

/** The most transitions a node can have: one per input byte. */
export const maxTransitionsPerNode = 256;

/** The most transitions the "any" layout stores in its state byte's low six bits. Format. */
export const stateByteTransitionCountMax = 63;

/** The most bytes a packed integer (an output or an address delta) takes. Format. */
export const packedIntegerMaxBytes = 8;

/** State byte tag (top two bits) of a one-transition node whose target is the previous node. */
export const stateOneTransitionNext = 0b11;

/** State byte tag (top two bits) of a one-transition node with explicit target and output. */
export const stateOneTransition = 0b10;

/** The final flag of the "any transitions" layout's state byte. */
export const stateFinalFlag = 0b0100_0000;

/** The low six bits of a state byte: a common-input index or a transition count. */
export const stateLowBitsMask = 0b0011_1111;

/**
 * The crate's masked checksum adds this after rotating the CRC (the Snappy framing convention,
 * meant to keep a CRC over data that contains CRCs from degenerating). Format.
 */
export const checksumMaskDelta = 0xa282ead8;

/**
 * The 63 input bytes the crate treats as common, most common first. A one-transition node whose
 * input is among them stores the input's index (plus one) in the state byte's low six bits instead
 * of spending a whole byte on it. The order is the crate's, fixed by the format. Format.
 */
const commonInputBytes = 'te/oasripcnw.hlm-du012g=:bf3y5&_4v9678k%?xCDASFIBEjPTzRNM+LOqHG';

/** `commonInputByIndex[i - 1]` is the byte whose common-input index is `i` (1-based). */
export const commonInputByIndex: Uint8Array = Uint8Array.from(commonInputBytes, (character) => character.charCodeAt(0));

/** `commonInputIndexOf[byte]` is the byte's 1-based common-input index, or 0 when it has none. */
export const commonInputIndexOf: Uint8Array = (() => {
  const indexes = new Uint8Array(256);
  for (let index = 0; index < commonInputByIndex.length; index++) {
    indexes[commonInputByIndex[index]] = index + 1;
  }
  return indexes;
})();

/** The crate's masked form of a CRC-32C: rotate right by 15, then add a constant (mod 2^32). */
export function maskChecksum(crc: number): number {
  return (((crc >>> 15) | (crc << 17)) + checksumMaskDelta) >>> 0;
}

/** Bytes needed to store `value` (a non-negative safe integer) little endian: 1 to 8. */
export function packedSize(value: number): number {
  if (value < 0x100) return 1;
  if (value < 0x1_0000) return 2;
  if (value < 0x100_0000) return 3;
  if (value < 0x1_0000_0000) return 4;
  if (value < 0x100_0000_0000) return 5;
  if (value < 0x1_0000_0000_0000) return 6;
  if (value < 0x100_0000_0000_0000) return 7;
  return 8;
}
