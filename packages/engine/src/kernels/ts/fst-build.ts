/**
 * Builds an FST map byte for byte as the Rust `fst` crate 0.4.7 does (`MapBuilder::memory()`,
 * then `insert` per key, then `into_inner()`), so the TypeScript and native kernels write
 * identical files.
 *
 * The algorithm is the crate's: keys arrive sorted, and the builder keeps the path of the previous
 * key as a stack of unfinished nodes. A new key shares a prefix with the previous one; every node
 * below that prefix can no longer change, so it is compiled (written out) deepest first, and the
 * new key's suffix is pushed. Outputs sit as close to the root as they can: a transition keeps the
 * part of its output that every key below it shares, and hands the rest down. Compiled nodes are
 * deduplicated through the registry (fst-registry.ts).
 */
import { StreamStackError } from '../../errors.js';
import type { PackedBytes } from '../kernels.js';
import { crc32c } from './crc.js';
import {
  commonInputIndexOf,
  emptyFinalAddress,
  fstChecksumBytes,
  fstFormatVersion,
  fstMapType,
  maskChecksum,
  maxTransitionsPerNode,
  noAddress,
  packedIntegerMaxBytes,
  packedSize,
  stateByteTransitionCountMax,
  stateFinalFlag,
  stateOneTransition,
  stateOneTransitionNext,
  transitionIndexBytes,
  transitionIndexThreshold,
} from './fst-format.js';
import { type NodeLevels, NodeRegistry, notRegistered } from './fst-registry.js';

/** Bytes the output buffer starts with; it doubles as it fills. */
export const fstBuildInitialOutputBytes = 1024;

/** Levels the unfinished-node stack starts with room for (one more than the longest key). */
export const fstBuildInitialStackLevels = 64;

/** Transitions a level has room for before it first grows. */
export const fstBuildInitialLevelTransitions = 4;

/**
 * Bytes a compiled node can take besides its transitions: a final output and the pack-size, count
 * and state bytes. Each transition adds at most an input, an 8-byte output and an 8-byte address
 * delta, and wide nodes a 256-byte index. Reserving the bound once per node lets the writers skip
 * per-byte capacity checks.
 */
const compiledNodeFixedBytes = packedIntegerMaxBytes + 3;
const compiledTransitionMaxBytes = 1 + 2 * packedIntegerMaxBytes;

/** 2^32 as a double, to split the halves of 64-bit integers. */
const twoToThe32 = 0x1_0000_0000;

/** Bytes of a u64 in the header and footer. */
const u64Bytes = 8;

/** Fills `target[offset, offset + size)` with `value` little endian (value < 2^53). */
function writePacked(target: Uint8Array, offset: number, value: number, size: number): void {
  const low = value >>> 0;
  target[offset] = low;
  if (size > 1) target[offset + 1] = low >>> 8;
  if (size > 2) target[offset + 2] = low >>> 16;
  if (size > 3) target[offset + 3] = low >>> 24;
  if (size > 4) {
    const high = (value - low) / twoToThe32;
    target[offset + 4] = high;
    if (size > 5) target[offset + 5] = high >>> 8;
    if (size > 6) target[offset + 6] = high >>> 16;
    if (size > 7) target[offset + 7] = high >>> 24;
  }
}

/**
 * The stack of unfinished nodes, in struct-of-arrays form (typed arrays indexed by level) so that
 * building allocates nothing per key; the arrays only grow, and only a few times. Level 0 is the
 * root and level `depth - 1` the deepest. Each level has its frozen transitions and, except the
 * deepest, one pending transition toward the level below, whose target is not known until that
 * level is compiled.
 */
class UnfinishedNodes implements NodeLevels {
  depth = 0;
  isFinal: Uint8Array = new Uint8Array(fstBuildInitialStackLevels);
  finalOutput: Float64Array = new Float64Array(fstBuildInitialStackLevels);
  transitionCount: Int32Array = new Int32Array(fstBuildInitialStackLevels);
  readonly inputs: Uint8Array[] = [];
  readonly outputs: Float64Array[] = [];
  readonly targets: Float64Array[] = [];
  hasPending: Uint8Array = new Uint8Array(fstBuildInitialStackLevels);
  pendingInput: Uint8Array = new Uint8Array(fstBuildInitialStackLevels);
  pendingOutput: Float64Array = new Float64Array(fstBuildInitialStackLevels);

  /** Pushes an empty node with no pending transition and returns its level. */
  push(isFinal: boolean): number {
    const level = this.depth;
    if (level === this.isFinal.length) this.growStack();
    if (level === this.inputs.length) {
      this.inputs.push(new Uint8Array(fstBuildInitialLevelTransitions));
      this.outputs.push(new Float64Array(fstBuildInitialLevelTransitions));
      this.targets.push(new Float64Array(fstBuildInitialLevelTransitions));
    }
    this.isFinal[level] = isFinal ? 1 : 0;
    this.finalOutput[level] = 0;
    this.transitionCount[level] = 0;
    this.hasPending[level] = 0;
    this.pendingOutput[level] = 0;
    this.depth = level + 1;
    return level;
  }

  /** Turns a level's pending transition, if any, into a real one pointing at `address`. */
  freezePending(level: number, address: number): void {
    if (this.hasPending[level] === 0) return;
    this.hasPending[level] = 0;
    const count = this.transitionCount[level];
    if (count === this.inputs[level].length) this.growTransitions(level, count + 1);
    this.inputs[level][count] = this.pendingInput[level];
    this.outputs[level][count] = this.pendingOutput[level];
    this.targets[level][count] = address;
    this.transitionCount[level] = count + 1;
  }

  /** Adds `excess` to every output of the node at `level`: its final output and transitions. */
  addOutputPrefix(level: number, excess: number): void {
    if (this.isFinal[level] !== 0) this.finalOutput[level] += excess;
    const outputs = this.outputs[level];
    const count = this.transitionCount[level];
    for (let index = 0; index < count; index++) outputs[index] += excess;
    if (this.hasPending[level] !== 0) this.pendingOutput[level] += excess;
  }

  private growStack(): void {
    const capacity = this.isFinal.length * 2;
    this.isFinal = grownUint8(this.isFinal, capacity);
    this.finalOutput = grownFloat64(this.finalOutput, capacity);
    this.transitionCount = grownInt32(this.transitionCount, capacity);
    this.hasPending = grownUint8(this.hasPending, capacity);
    this.pendingInput = grownUint8(this.pendingInput, capacity);
    this.pendingOutput = grownFloat64(this.pendingOutput, capacity);
  }

  private growTransitions(level: number, needed: number): void {
    const doubled = this.inputs[level].length * 2;
    const capacity = Math.min(maxTransitionsPerNode, Math.max(needed, doubled));
    this.inputs[level] = grownUint8(this.inputs[level], capacity);
    this.outputs[level] = grownFloat64(this.outputs[level], capacity);
    this.targets[level] = grownFloat64(this.targets[level], capacity);
  }
}

/** One build: the output written so far, the unfinished nodes and the registry. */
class FstWriter {
  /** The output, written front to back; `length` is the crate's byte count (and next address). */
  private output: Uint8Array = new Uint8Array(fstBuildInitialOutputBytes);
  private length = 0;
  private readonly nodes = new UnfinishedNodes();
  private readonly registry = new NodeRegistry();
  /** Address of the last node written, for the "target is the previous node" layout. */
  private lastAddress = noAddress;
  private keyCount = 0;

  constructor() {
    this.writeU64(fstFormatVersion);
    this.writeU64(fstMapType);
    this.nodes.push(false);
  }

  /**
   * Adds every key in order, checking each sorts after the one before. Keys and values are read
   * here, out of their arrays, rather than passed in one call per key: a double passed to a call
   * that is not inlined is boxed, and this loop would then allocate per key.
   */
  addKeys(bytes: Uint8Array, ends: Uint32Array, values: Float64Array): void {
    let previousStart = 0;
    let previousEnd = 0;
    for (let index = 0; index < ends.length; index++) {
      const start = index === 0 ? 0 : ends[index - 1];
      const end = ends[index];
      // The length of the prefix shared with the previous key decides both the order check and
      // how much of the unfinished path the new key keeps.
      const previousLength = previousEnd - previousStart;
      const length = end - start;
      const sharedMax = Math.min(previousLength, length);
      let shared = 0;
      while (shared < sharedMax && bytes[previousStart + shared] === bytes[start + shared]) {
        shared++;
      }
      if (index > 0) {
        const ascending =
          shared < sharedMax ? bytes[start + shared] > bytes[previousStart + shared] : length > previousLength;
        if (!ascending) throw keyOrderError(index, shared === length && length === previousLength);
      }
      this.insert(bytes, start, end, values, index, shared);
      previousStart = start;
      previousEnd = end;
    }
  }

  /** Adds key `index`, which sorts after the previous key and shares `prefixLength` bytes. */
  private insert(
    bytes: Uint8Array,
    start: number,
    end: number,
    values: Float64Array,
    index: number,
    prefixLength: number,
  ): void {
    const nodes = this.nodes;
    if (start === end) {
      // The empty key can only come first, so the count is exactly one; it is the root's output.
      this.keyCount = 1;
      nodes.isFinal[0] = 1;
      nodes.finalOutput[0] = values[index];
      return;
    }
    // Walk the shared prefix, keeping on each pending transition only the output the new key
    // shares with it and handing the excess down to every output of the level below.
    let remaining = values[index];
    for (let level = 0; level < prefixLength; level++) {
      const pendingOutput = nodes.pendingOutput[level];
      const shared = Math.min(pendingOutput, remaining);
      const excess = pendingOutput - shared;
      remaining -= shared;
      nodes.pendingOutput[level] = shared;
      if (excess !== 0) nodes.addOutputPrefix(level + 1, excess);
    }
    this.keyCount++;
    this.compileFrom(prefixLength);
    // The new key's suffix: a pending transition from the deepest kept level, carrying what is
    // left of the output, then one fresh level per remaining byte, then the final node.
    const top = nodes.depth - 1;
    nodes.hasPending[top] = 1;
    nodes.pendingInput[top] = bytes[start + prefixLength];
    nodes.pendingOutput[top] = remaining;
    for (let at = start + prefixLength + 1; at < end; at++) {
      const level = nodes.push(false);
      nodes.hasPending[level] = 1;
      nodes.pendingInput[level] = bytes[at];
    }
    nodes.push(true);
  }

  /** Compiles what is left and writes the footer; the writer is spent afterwards. */
  finish(): Uint8Array {
    this.compileFrom(0);
    const rootAddress = this.compileLevel(0);
    this.writeU64(this.keyCount);
    this.writeU64(rootAddress);
    // The checksum covers every byte before it, as the crate's counting writer sums them.
    const checksum = maskChecksum(crc32c(this.output.subarray(0, this.length)));
    this.reserve(fstChecksumBytes);
    writePacked(this.output, this.length, checksum, fstChecksumBytes);
    this.length += fstChecksumBytes;
    return this.output.slice(0, this.length);
  }

  /** Compiles every level below `keepLevel`, deepest first, linking each to its parent. */
  private compileFrom(keepLevel: number): void {
    const nodes = this.nodes;
    let address = noAddress;
    while (keepLevel + 1 < nodes.depth) {
      const level = nodes.depth - 1;
      if (address !== noAddress) nodes.freezePending(level, address);
      nodes.depth--;
      address = this.compileLevel(level);
    }
    nodes.freezePending(nodes.depth - 1, address);
  }

  /**
   * Compiles the node at `level` (its pending transition already frozen) and returns its address:
   * the shared empty-final sentinel, the address of an identical node the registry remembers, or
   * the address of a fresh copy written now.
   */
  private compileLevel(level: number): number {
    const nodes = this.nodes;
    const isFinal = nodes.isFinal[level];
    const count = nodes.transitionCount[level];
    if (isFinal !== 0 && count === 0 && nodes.finalOutput[level] === 0) return emptyFinalAddress;
    const registered = this.registry.find(nodes, level);
    if (registered !== notRegistered) return registered;

    const start = this.length;
    const indexBytes = count > transitionIndexThreshold ? transitionIndexBytes : 0;
    this.reserve(compiledNodeFixedBytes + count * compiledTransitionMaxBytes + indexBytes);
    if (count !== 1 || isFinal !== 0) {
      this.writeAnyTransitions(start, level);
    } else if (nodes.targets[level][0] === this.lastAddress && nodes.outputs[level][0] === 0) {
      this.writeOneTransitionToPrevious(nodes.inputs[level][0]);
    } else {
      this.writeOneTransition(start, level);
    }
    const address = this.length - 1;
    this.lastAddress = address;
    this.registry.remember(address);
    return address;
  }

  /**
   * The general layout, read backwards from the state byte: state, transition count (only when it
   * does not fit the state byte), pack sizes, the optional index, the inputs, the target deltas,
   * the outputs, and the final output. Lists run from the last transition to the first.
   */
  private writeAnyTransitions(start: number, level: number): void {
    const nodes = this.nodes;
    const isFinal = nodes.isFinal[level];
    const finalOutput = nodes.finalOutput[level];
    const count = nodes.transitionCount[level];
    const inputs = nodes.inputs[level];
    const outputs = nodes.outputs[level];
    const targets = nodes.targets[level];
    let deltaSize = 0;
    let outputSize = packedSize(finalOutput);
    let anyOutput = finalOutput !== 0;
    for (let index = 0; index < count; index++) {
      const target = targets[index];
      const size = packedSize(target === emptyFinalAddress ? 0 : start - target);
      if (size > deltaSize) deltaSize = size;
      const output = outputs[index];
      if (output !== 0) {
        anyOutput = true;
        const outputBytes = packedSize(output);
        if (outputBytes > outputSize) outputSize = outputBytes;
      }
    }
    const bytes = this.output;
    let position = this.length;
    if (anyOutput) {
      if (isFinal !== 0) {
        writePacked(bytes, position, finalOutput, outputSize);
        position += outputSize;
      }
      for (let index = count - 1; index >= 0; index--) {
        writePacked(bytes, position, outputs[index], outputSize);
        position += outputSize;
      }
    }
    for (let index = count - 1; index >= 0; index--) {
      const target = targets[index];
      writePacked(bytes, position, target === emptyFinalAddress ? 0 : start - target, deltaSize);
      position += deltaSize;
    }
    for (let index = count - 1; index >= 0; index--) bytes[position++] = inputs[index];
    if (count > transitionIndexThreshold) {
      // Absent inputs map to 255, which is never a valid index unless all 256 inputs are present.
      bytes.fill(0xff, position, position + transitionIndexBytes);
      for (let index = 0; index < count; index++) bytes[position + inputs[index]] = index;
      position += transitionIndexBytes;
    }
    bytes[position++] = (deltaSize << 4) | (anyOutput ? outputSize : 0);
    const countFitsState = count >= 1 && count <= stateByteTransitionCountMax;
    if (!countFitsState) {
      // A count of 256 does not fit a byte; 1 stands in for it, since one transition always fits
      // the state byte and so can never appear here.
      bytes[position++] = count === maxTransitionsPerNode ? 1 : count;
    }
    bytes[position++] = (isFinal !== 0 ? stateFinalFlag : 0) | (countFitsState ? count : 0);
    this.length = position;
  }

  /** One transition, no output, to the node written just before: just the input and the state. */
  private writeOneTransitionToPrevious(input: number): void {
    const commonIndex = commonInputIndexOf[input];
    if (commonIndex === 0) this.output[this.length++] = input;
    this.output[this.length++] = (stateOneTransitionNext << 6) | commonIndex;
  }

  /** One transition: output (unless 0), target delta, pack sizes, input (unless common), state. */
  private writeOneTransition(start: number, level: number): void {
    const input = this.nodes.inputs[level][0];
    const output = this.nodes.outputs[level][0];
    const target = this.nodes.targets[level][0];
    const bytes = this.output;
    let position = this.length;
    const outputSize = output === 0 ? 0 : packedSize(output);
    if (outputSize !== 0) {
      writePacked(bytes, position, output, outputSize);
      position += outputSize;
    }
    const delta = target === emptyFinalAddress ? 0 : start - target;
    const deltaSize = packedSize(delta);
    writePacked(bytes, position, delta, deltaSize);
    position += deltaSize;
    bytes[position++] = (deltaSize << 4) | outputSize;
    const commonIndex = commonInputIndexOf[input];
    if (commonIndex === 0) bytes[position++] = input;
    bytes[position++] = (stateOneTransition << 6) | commonIndex;
    this.length = position;
  }

  private reserve(bytes: number): void {
    if (this.length + bytes <= this.output.length) return;
    let capacity = this.output.length * 2;
    while (capacity < this.length + bytes) capacity *= 2;
    this.output = grownUint8(this.output, capacity);
  }

  private writeU64(value: number): void {
    this.reserve(u64Bytes);
    writePacked(this.output, this.length, value, u64Bytes);
    this.length += u64Bytes;
  }
}

function grownUint8(array: Uint8Array, capacity: number): Uint8Array {
  const grown = new Uint8Array(capacity);
  grown.set(array);
  return grown;
}

function grownInt32(array: Int32Array, capacity: number): Int32Array {
  const grown = new Int32Array(capacity);
  grown.set(array);
  return grown;
}

function grownFloat64(array: Float64Array, capacity: number): Float64Array {
  const grown = new Float64Array(capacity);
  grown.set(array);
  return grown;
}

function keyOrderError(index: number, duplicate: boolean): StreamStackError {
  return new StreamStackError(
    'FST_KEY_ORDER',
    duplicate
      ? `fstBuild key ${index} repeats the key before it`
      : `fstBuild key ${index} sorts before the key before it`,
    { details: { index, duplicate } },
  );
}

/**
 * Builds an FST map from strictly ascending keys to safe-integer values, byte-identical to the
 * crate's. All arguments are checked first (`INVALID_ARGUMENT`), as the native twin does, then keys
 * in order as they are added (`FST_KEY_ORDER` at the first key not greater than the one before).
 */
export function fstBuild(keys: PackedBytes, values: Float64Array): Uint8Array {
  checkBuildArguments(keys, values);
  const writer = new FstWriter();
  writer.addKeys(keys.bytes, keys.ends, values);
  return writer.finish();
}

/** Throws `INVALID_ARGUMENT` unless the keys are well packed and every value is a safe integer. */
function checkBuildArguments(keys: PackedBytes, values: Float64Array): void {
  const { bytes, ends } = keys;
  const count = ends.length;
  if (values.length !== count) {
    throw new StreamStackError('INVALID_ARGUMENT', `fstBuild got ${count} keys but ${values.length} values`, {
      details: { keys: count, values: values.length },
    });
  }
  let previousEnd = 0;
  for (let index = 0; index < count; index++) {
    const end = ends[index];
    if (end < previousEnd || end > bytes.length) {
      throw new StreamStackError('INVALID_ARGUMENT', `fstBuild key ${index} ends at ${end}, outside its buffer`, {
        details: { index, end, previousEnd, bytes: bytes.length },
      });
    }
    previousEnd = end;
    const value = values[index];
    if (!(value >= 0 && Number.isSafeInteger(value))) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `fstBuild value ${index} is ${value}, not a non-negative safe integer`,
        { details: { index, value } },
      );
    }
  }
}
