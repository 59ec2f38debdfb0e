/**
 * Builds an FST map byte for byte as the Rust `fst` crate 0.4.7 does (`MapBuilder::memory()`, then
 * `insert` per key, then `into_inner()`), so the TypeScript and native kernels write identical files.
 *
 * The algorithm is the crate's: keys arrive sorted, and the builder keeps the path of the previous
 * key as a stack of unfinished nodes. A new key shares a prefix with the previous one; every node
 * below that prefix can no longer change, so it is compiled (written out) deepest first, and the new
 * key's suffix is pushed. Outputs are pushed as close to the root as they can go: a transition keeps
 * the part of its output that every key below it shares, and hands the rest down.
 *
 * Compiled nodes are deduplicated through a registry, a fixed-size hash table with two cells per
 * row kept in most-recently-used order. It is a cache, not a full map: a node evicted from it gets
 * written again when it recurs. The file's bytes therefore depend on the exact hash, table size and
 * eviction order, and all three below match the crate's.
 */
import { StreamStackError } from '../../errors.js';
import type { PackedBytes } from '../kernels.js';
import { crc32c } from './crc32c.js';
import {
  commonInputIndexOf,
  emptyFinalAddress,
  fstFormatVersion,
  fstHeaderBytes,
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

/**
 * Rows in the node registry. The crate hard-codes 10,000; the row a node lands in decides which
 * nodes it can evict, so this must match for the output bytes to match. Format (of the output).
 */
export const fstRegistryRows = 10_000;

/**
 * Cells per registry row, kept in most-recently-used order; the crate hard-codes 2 and the
 * promotion and eviction order below is written for exactly two. Format (of the output).
 */
export const fstRegistryCellsPerRow = 2;

// Layout of the registry table, in float64 slots. A row is a header (which build last used it, and
// which of its two cells is the most recently used) and two cells. A cell is its node's address
// (noAddress when empty), the node's 64-bit hash as two halves (to reject most mismatches at once),
// its shape (transition count times two, plus one when final), its final output, where its
// transitions live in the overflow pool when they do not fit inline and how many fit there, then
// its transitions inline as (input, output, target) triples when there are few enough: most nodes
// have one or two.
const rowGenerationSlot = 0;
const rowFirstCellSlot = 1;
const registryRowHeaderSlots = 2;
const cellAddressSlot = 0;
const cellHashHighSlot = 1;
const cellHashLowSlot = 2;
const cellShapeSlot = 3;
const cellFinalOutputSlot = 4;
const cellOverflowAtSlot = 5;
const cellOverflowCapacitySlot = 6;
const cellTransitionsSlot = 7;
/** Transitions a registry cell stores inline; nodes with more keep theirs in the overflow pool. */
const cellInlineTransitions = 2;
const registryCellSlots = cellTransitionsSlot + 3 * cellInlineTransitions;
const registryRowSlots = registryRowHeaderSlots + fstRegistryCellsPerRow * registryCellSlots;

/** Room, in transitions, a cell first takes in the overflow pool; it doubles from there. */
const overflowInitialTransitions = 8;

/** Float64 slots the overflow pool starts with; it doubles as it fills. */
const overflowPoolInitialSlots = 1024;

/**
 * The registry table, shared by every build so that a small build does not pay for allocating and
 * clearing 1.8 MB. Builds are synchronous, so only one uses it at a time; each stamps the rows it
 * touches with its own generation and treats rows with an older stamp as empty.
 */
let sharedRegistry: Float64Array | undefined;
let lastRegistryGeneration = 0;

/** Bytes the output buffer starts with; it doubles as it fills. */
const initialOutputCapacityBytes = 1024;

/** Depth the unfinished-node stack starts with (one more than the longest key so far). */
const initialStackDepth = 64;

/** Transitions a stack level or registry cell has room for before it first grows. */
const initialTransitionCapacity = 4;

/**
 * Bytes a compiled node can take beyond its transitions: a final output, the pack-size, count and
 * state bytes. Each transition adds at most an input, an 8-byte output and an 8-byte address delta,
 * and wide nodes a 256-byte index. Reserving the bound once per node lets the writers skip
 * per-byte capacity checks.
 */
const compiledNodeFixedBytes = packedIntegerMaxBytes + 3;
const compiledTransitionMaxBytes = 1 + 2 * packedIntegerMaxBytes;

/** 64-bit FNV-1a offset basis (14695981039346656037), as high and low 32-bit halves. */
const fnvOffsetHigh = 0xcbf29ce4;
const fnvOffsetLow = 0x84222325;

/**
 * The 64-bit FNV prime is 2^40 + 435. Multiplying by it modulo 2^64 is a shift left by 40 plus a
 * multiply by 435, which 32-bit halves and doubles do exactly without BigInt.
 */
const fnvPrimeLowPart = 435;

/** 2^32 as a double, to split and join the halves of 64-bit integers. */
const twoToThe32 = 0x1_0000_0000;

/** 2^-32, to shift a double right by 32 bits with a multiplication, which is exact. */
const twoToTheMinus32 = 1 / twoToThe32;

/** 2^32 mod the registry row count, to reduce a 64-bit hash from its halves. */
const twoToThe32ModRows = twoToThe32 % fstRegistryRows;

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

/** Positions of the two halves of a 64-bit hash in its Int32Array. */
const hashHighIndex = 0;
const hashLowIndex = 1;

/** Mask of the low 16 bits, to split a 32-bit half into pieces whose products stay exact. */
const low16Mask = 0xffff;

/**
 * One FNV-1a step over a field taken as a u64 (below 2^53): XOR it in, then multiply by the prime
 * 2^40 + 435 modulo 2^64. On 32-bit halves, all in int32 arithmetic so the JIT emits plain machine
 * integer ops: the new low half is low * 435 mod 2^32; the new high half is high * 435, plus the
 * carry out of low * 435 (computed from low's 16-bit pieces), plus low << 8 (the 2^40 term, shifted
 * down by 32), all mod 2^32. Halves are stored signed; only their bits matter.
 */
function mixHashField(hash: Int32Array, value: number): void {
  const low = hash[hashLowIndex] ^ value;
  let high = hash[hashHighIndex];
  if (value >= twoToThe32) high ^= Math.floor(value * twoToTheMinus32);
  const carry = ((low >>> 16) * fnvPrimeLowPart + (((low & low16Mask) * fnvPrimeLowPart) >>> 16)) >>> 16;
  hash[hashLowIndex] = Math.imul(low, fnvPrimeLowPart);
  hash[hashHighIndex] = (Math.imul(high, fnvPrimeLowPart) + carry + (low << 8)) | 0;
}

/**
 * One build. Nodes live in struct-of-arrays form (typed arrays indexed by stack depth or registry
 * cell) so the hot loop allocates nothing per key; arrays only grow, and only a few times.
 */
class FstWriter {
  // The output, written front to back; `length` is the crate's byte count (and next address).
  private output: Uint8Array = new Uint8Array(initialOutputCapacityBytes);
  private length = 0;

  // The unfinished nodes: level 0 is the root, level `depth - 1` the deepest. Each level has its
  // frozen transitions and, except the deepest, one pending transition toward the level below,
  // whose target is not known until that level is compiled.
  private depth = 0;
  private levelIsFinal: Uint8Array = new Uint8Array(initialStackDepth);
  private levelFinalOutput: Float64Array = new Float64Array(initialStackDepth);
  private levelTransitionCount: Int32Array = new Int32Array(initialStackDepth);
  private levelInputs: Uint8Array[] = [];
  private levelOutputs: Float64Array[] = [];
  private levelTargets: Float64Array[] = [];
  private levelHasPending: Uint8Array = new Uint8Array(initialStackDepth);
  private levelPendingInput: Uint8Array = new Uint8Array(initialStackDepth);
  private levelPendingOutput: Float64Array = new Float64Array(initialStackDepth);

  // The registry: one flat table of rows, each a header and two cells (layout above), so a lookup
  // touches a few adjacent cache lines rather than one line per field. Nodes with more transitions
  // than a cell holds inline keep them in the overflow pool, which belongs to this build.
  private readonly registry: Float64Array;
  private readonly generation: number;
  private overflowPool: Float64Array = new Float64Array(overflowPoolInitialSlots);
  private overflowUsed = 0;

  /**
   * The FNV-1a hash of the node being compiled, as two 32-bit halves. It lives in a typed
   * array because a double stored in an object field is boxed, which would allocate per node.
   */
  private readonly hash = new Int32Array(2);

  /** Address of the last node written, for the "target is the previous node" layout. */
  private lastAddress = noAddress;
  private keyCount = 0;

  constructor() {
    sharedRegistry ??= new Float64Array(fstRegistryRows * registryRowSlots);
    this.registry = sharedRegistry;
    this.generation = ++lastRegistryGeneration;
    this.writeU64(fstFormatVersion);
    this.writeU64(fstMapType);
    this.pushLevel(false);
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
      const sharedMax = previousLength < length ? previousLength : length;
      let shared = 0;
      while (shared < sharedMax && bytes[previousStart + shared] === bytes[start + shared]) shared++;
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

  /** Adds key `index`, which sorts after the previous key and shares `prefixLength` bytes with it. */
  private insert(
    bytes: Uint8Array,
    start: number,
    end: number,
    values: Float64Array,
    index: number,
    prefixLength: number,
  ): void {
    if (start === end) {
      // The empty key can only come first, so the count is exactly one; it is the root's output.
      this.keyCount = 1;
      this.levelIsFinal[0] = 1;
      this.levelFinalOutput[0] = values[index];
      return;
    }
    // Walk the shared prefix, keeping on each pending transition only the output the new key
    // shares with it and handing the excess down to every output of the level below.
    let remaining = values[index];
    for (let level = 0; level < prefixLength; level++) {
      const pendingOutput = this.levelPendingOutput[level];
      const shared = pendingOutput < remaining ? pendingOutput : remaining;
      const excess = pendingOutput - shared;
      remaining -= shared;
      this.levelPendingOutput[level] = shared;
      if (excess !== 0) {
        const below = level + 1;
        if (this.levelIsFinal[below] !== 0) this.levelFinalOutput[below] += excess;
        const outputs = this.levelOutputs[below];
        const count = this.levelTransitionCount[below];
        for (let transition = 0; transition < count; transition++) outputs[transition] += excess;
        if (this.levelHasPending[below] !== 0) this.levelPendingOutput[below] += excess;
      }
    }
    this.keyCount++;
    this.compileFrom(prefixLength);
    // The new key's suffix: a pending transition from the deepest kept level, carrying what is
    // left of the output, then one fresh level per remaining byte, then the final node.
    const top = this.depth - 1;
    this.levelHasPending[top] = 1;
    this.levelPendingInput[top] = bytes[start + prefixLength];
    this.levelPendingOutput[top] = remaining;
    for (let at = start + prefixLength + 1; at < end; at++) {
      const level = this.pushLevel(false);
      this.levelHasPending[level] = 1;
      this.levelPendingInput[level] = bytes[at];
    }
    this.pushLevel(true);
  }

  /** Compiles what is left and writes the footer; the builder is spent afterwards. */
  finish(): Uint8Array {
    this.compileFrom(0);
    const rootAddress = this.compileLevel(0);
    this.writeU64(this.keyCount);
    this.writeU64(rootAddress);
    const checksum = maskChecksum(crc32c(this.output.subarray(0, this.length)));
    this.reserve(4);
    writePacked(this.output, this.length, checksum, 4);
    this.length += 4;
    return this.output.slice(0, this.length);
  }

  /** Compiles every level below `keepLevel`, deepest first, linking each to its parent. */
  private compileFrom(keepLevel: number): void {
    let address = noAddress;
    while (keepLevel + 1 < this.depth) {
      const level = this.depth - 1;
      if (address !== noAddress) this.freezePending(level, address);
      this.depth--;
      address = this.compileLevel(level);
    }
    this.freezePending(this.depth - 1, address);
  }

  /** Turns a level's pending transition, if any, into a real one pointing at `address`. */
  private freezePending(level: number, address: number): void {
    if (this.levelHasPending[level] === 0) return;
    this.levelHasPending[level] = 0;
    const count = this.levelTransitionCount[level];
    if (count === this.levelInputs[level].length) this.growLevelTransitions(level, count + 1);
    this.levelInputs[level][count] = this.levelPendingInput[level];
    this.levelOutputs[level][count] = this.levelPendingOutput[level];
    this.levelTargets[level][count] = address;
    this.levelTransitionCount[level] = count + 1;
  }

  /** Pushes an empty node with no pending transition and returns its level. */
  private pushLevel(isFinal: boolean): number {
    const level = this.depth;
    if (level === this.levelIsFinal.length) this.growStack();
    if (level === this.levelInputs.length) {
      this.levelInputs.push(new Uint8Array(initialTransitionCapacity));
      this.levelOutputs.push(new Float64Array(initialTransitionCapacity));
      this.levelTargets.push(new Float64Array(initialTransitionCapacity));
    }
    this.levelIsFinal[level] = isFinal ? 1 : 0;
    this.levelFinalOutput[level] = 0;
    this.levelTransitionCount[level] = 0;
    this.levelHasPending[level] = 0;
    this.levelPendingOutput[level] = 0;
    this.depth = level + 1;
    return level;
  }

  /**
   * Compiles the node at `level` (its pending transition already frozen) and returns its address:
   * the shared empty-final sentinel, the address of an identical node the registry remembers, or
   * the address of a fresh copy written now.
   */
  private compileLevel(level: number): number {
    const isFinal = this.levelIsFinal[level];
    const finalOutput = this.levelFinalOutput[level];
    const count = this.levelTransitionCount[level];
    if (isFinal !== 0 && count === 0 && finalOutput === 0) return emptyFinalAddress;
    const inputs = this.levelInputs[level];
    const outputs = this.levelOutputs[level];
    const targets = this.levelTargets[level];

    const hash = this.hash;
    hash[hashHighIndex] = fnvOffsetHigh;
    hash[hashLowIndex] = fnvOffsetLow;
    mixHashField(hash, isFinal);
    mixHashField(hash, finalOutput);
    for (let index = 0; index < count; index++) {
      mixHashField(hash, inputs[index]);
      mixHashField(hash, outputs[index]);
      mixHashField(hash, targets[index]);
    }
    const hashHigh = hash[hashHighIndex];
    const hashLow = hash[hashLowIndex];
    // The crate reduces the whole u64 modulo the row count: (high * 2^32 + low) mod rows, which is
    // ((high mod rows) * (2^32 mod rows) + low) mod rows, small enough to be exact in a double.
    // Remainders are taken by floor division, which the JIT compiles to a few instructions, where
    // `%` on values above 2^30 can fall back to a slow floating-point remainder.
    const highUnsigned = hashHigh >>> 0;
    const highReduced = highUnsigned - Math.floor(highUnsigned / fstRegistryRows) * fstRegistryRows;
    const combined = highReduced * twoToThe32ModRows + (hashLow >>> 0);
    const row = combined - Math.floor(combined / fstRegistryRows) * fstRegistryRows;

    // Look in the most recently used cell, then the other; a hit in the other makes it the most
    // recently used. A miss overwrites the least recently used cell and promotes it.
    const registry = this.registry;
    const rowStart = row * registryRowSlots;
    if (registry[rowStart + rowGenerationSlot] !== this.generation) {
      // First use of the row in this build: whatever an earlier build left there is not ours.
      registry[rowStart + rowGenerationSlot] = this.generation;
      registry[rowStart + rowFirstCellSlot] = 0;
      for (let cell = 0; cell < fstRegistryCellsPerRow; cell++) {
        const at = rowStart + registryRowHeaderSlots + cell * registryCellSlots;
        registry[at + cellAddressSlot] = noAddress;
        registry[at + cellOverflowCapacitySlot] = 0;
      }
    }
    const first = registry[rowStart + rowFirstCellSlot];
    const mostRecentAt = rowStart + registryRowHeaderSlots + first * registryCellSlots;
    if (this.cellMatches(mostRecentAt, level)) {
      return registry[mostRecentAt + cellAddressSlot];
    }
    const other = 1 - first;
    const leastRecentAt = rowStart + registryRowHeaderSlots + other * registryCellSlots;
    registry[rowStart + rowFirstCellSlot] = other;
    if (this.cellMatches(leastRecentAt, level)) {
      return registry[leastRecentAt + cellAddressSlot];
    }
    this.storeInCell(leastRecentAt, level);

    const start = this.length;
    this.reserve(
      compiledNodeFixedBytes + count * compiledTransitionMaxBytes + (count > transitionIndexThreshold ? transitionIndexBytes : 0),
    );
    if (count !== 1 || isFinal !== 0) {
      this.writeAnyTransitions(start, level);
    } else if (targets[0] === this.lastAddress && outputs[0] === 0) {
      this.writeOneTransitionToPrevious(inputs[0]);
    } else {
      this.writeOneTransition(start, level);
    }
    const address = this.length - 1;
    this.lastAddress = address;
    registry[leastRecentAt + cellAddressSlot] = address;
    return address;
  }

  /**
   * Whether the registry cell starting at slot `at` holds the node at `level` (whose hash is in
   * `hash`). Reads its operands from the builder's arrays rather than taking them as arguments,
   * because doubles passed to a call that is not inlined get boxed, and this runs per node.
   */
  private cellMatches(at: number, level: number): boolean {
    const registry = this.registry;
    const count = this.levelTransitionCount[level];
    const inputs = this.levelInputs[level];
    const outputs = this.levelOutputs[level];
    const targets = this.levelTargets[level];
    if (
      registry[at + cellHashLowSlot] !== this.hash[hashLowIndex] ||
      registry[at + cellHashHighSlot] !== this.hash[hashHighIndex] ||
      registry[at + cellAddressSlot] === noAddress ||
      registry[at + cellShapeSlot] !== count * 2 + this.levelIsFinal[level] ||
      registry[at + cellFinalOutputSlot] !== this.levelFinalOutput[level]
    ) {
      return false;
    }
    let stored: Float64Array = registry;
    let offset = at + cellTransitionsSlot;
    if (count > cellInlineTransitions) {
      stored = this.overflowPool;
      offset = registry[at + cellOverflowAtSlot];
    }
    for (let index = 0; index < count; index++, offset += 3) {
      if (
        stored[offset] !== inputs[index] ||
        stored[offset + 1] !== outputs[index] ||
        stored[offset + 2] !== targets[index]
      ) {
        return false;
      }
    }
    return true;
  }

  /** Copies the node at `level` into the registry cell starting at slot `at`. */
  private storeInCell(at: number, level: number): void {
    const registry = this.registry;
    const count = this.levelTransitionCount[level];
    const inputs = this.levelInputs[level];
    const outputs = this.levelOutputs[level];
    const targets = this.levelTargets[level];
    registry[at + cellHashHighSlot] = this.hash[hashHighIndex];
    registry[at + cellHashLowSlot] = this.hash[hashLowIndex];
    registry[at + cellShapeSlot] = count * 2 + this.levelIsFinal[level];
    registry[at + cellFinalOutputSlot] = this.levelFinalOutput[level];
    let stored: Float64Array = registry;
    let offset = at + cellTransitionsSlot;
    if (count > cellInlineTransitions) {
      if (registry[at + cellOverflowCapacitySlot] < count) {
        // Take fresh room from the pool, a power of two so that a cell that sees nodes of growing
        // width moves a handful of times; the room it leaves behind is not reused.
        let capacity = overflowInitialTransitions;
        while (capacity < count) capacity *= 2;
        registry[at + cellOverflowAtSlot] = this.takeOverflow(capacity * 3);
        registry[at + cellOverflowCapacitySlot] = capacity;
      }
      stored = this.overflowPool;
      offset = registry[at + cellOverflowAtSlot];
    }
    for (let index = 0; index < count; index++, offset += 3) {
      stored[offset] = inputs[index];
      stored[offset + 1] = outputs[index];
      stored[offset + 2] = targets[index];
    }
  }

  /** Takes `slots` slots from the overflow pool and returns where they start. */
  private takeOverflow(slots: number): number {
    const at = this.overflowUsed;
    if (at + slots > this.overflowPool.length) {
      let capacity = this.overflowPool.length * 2;
      while (capacity < at + slots) capacity *= 2;
      this.overflowPool = grownFloat64(this.overflowPool, capacity);
    }
    this.overflowUsed = at + slots;
    return at;
  }

  /**
   * The general layout, read backwards from the state byte: state, transition count (only when it
   * does not fit the state byte), pack sizes, the optional index, the inputs, the target deltas,
   * the outputs, and the final output. Lists run from the last transition to the first.
   */
  private writeAnyTransitions(start: number, level: number): void {
    const isFinal = this.levelIsFinal[level];
    const finalOutput = this.levelFinalOutput[level];
    const count = this.levelTransitionCount[level];
    const inputs = this.levelInputs[level];
    const outputs = this.levelOutputs[level];
    const targets = this.levelTargets[level];
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

  /** One transition: output (if not zero), target delta, pack sizes, input (if not common), state. */
  private writeOneTransition(start: number, level: number): void {
    const input = this.levelInputs[level][0];
    const output = this.levelOutputs[level][0];
    const target = this.levelTargets[level][0];
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

  private growStack(): void {
    const capacity = this.levelIsFinal.length * 2;
    this.levelIsFinal = grownUint8(this.levelIsFinal, capacity);
    this.levelFinalOutput = grownFloat64(this.levelFinalOutput, capacity);
    this.levelTransitionCount = grownInt32(this.levelTransitionCount, capacity);
    this.levelHasPending = grownUint8(this.levelHasPending, capacity);
    this.levelPendingInput = grownUint8(this.levelPendingInput, capacity);
    this.levelPendingOutput = grownFloat64(this.levelPendingOutput, capacity);
  }

  private growLevelTransitions(level: number, needed: number): void {
    const capacity = Math.min(maxTransitionsPerNode, Math.max(needed, this.levelInputs[level].length * 2));
    this.levelInputs[level] = grownUint8(this.levelInputs[level], capacity);
    this.levelOutputs[level] = grownFloat64(this.levelOutputs[level], capacity);
    this.levelTargets[level] = grownFloat64(this.levelTargets[level], capacity);
  }

  private reserve(bytes: number): void {
    if (this.length + bytes <= this.output.length) return;
    let capacity = this.output.length * 2;
    while (capacity < this.length + bytes) capacity *= 2;
    this.output = grownUint8(this.output, capacity);
  }

  private writeU64(value: number): void {
    this.reserve(8);
    this.output.fill(0, this.length, this.length + 8);
    writePacked(this.output, this.length, value, 8);
    this.length += 8;
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
    duplicate ? `fstBuild key ${index} repeats the key before it` : `fstBuild key ${index} sorts before the key before it`,
    { details: { index, duplicate } },
  );
}

/**
 * Builds an FST map from strictly ascending keys to safe-integer values, byte-identical to the
 * crate's. Values are all checked first (`INVALID_ARGUMENT`), then keys in order as they are added
 * (`FST_KEY_ORDER` for the first key that is not greater than the one before it).
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
      throw new StreamStackError('INVALID_ARGUMENT', `fstBuild value ${index} is ${value}, not a non-negative safe integer`, {
        details: { index, value },
      });
    }
  }
}
