/**
 * The FST builder's node registry, as the Rust `fst` crate (0.4.7) keeps it: a fixed-size hash
 * table of compiled nodes with two cells per row in most-recently-used order. It is a cache, not a
 * full map: a node evicted from it is written again when it recurs. The bytes of a built FST
 * therefore depend on the exact hash, table size and eviction order, and all three here match the
 * crate's.
 */
import { noAddress } from './fst-format.js';

/**
 * Rows in the registry. The crate hard-codes 10,000; the row a node lands in decides which nodes
 * it can evict, so this must match for the output bytes to match. Format (of the output).
 */
export const fstRegistryRows = 10_000;

/**
 * Cells per registry row, kept in most-recently-used order; the crate hard-codes 2, and the
 * promotion and eviction below are written for exactly two. Format (of the output).
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
const rowHeaderSlots = 2;
const cellAddressSlot = 0;
const cellHashHighSlot = 1;
const cellHashLowSlot = 2;
const cellShapeSlot = 3;
const cellFinalOutputSlot = 4;
const cellOverflowAtSlot = 5;
const cellOverflowCapacitySlot = 6;
const cellTransitionsSlot = 7;
/** Transitions a cell stores inline; nodes with more keep theirs in the overflow pool. */
export const fstRegistryInlineTransitions = 2;
const cellSlots = cellTransitionsSlot + 3 * fstRegistryInlineTransitions;
const rowSlots = rowHeaderSlots + fstRegistryCellsPerRow * cellSlots;

/** Room, in transitions, a cell first takes in the overflow pool; it doubles from there. */
export const fstRegistryOverflowInitialTransitions = 8;

/** Float64 slots the overflow pool starts with; it doubles as it fills. */
export const fstRegistryOverflowPoolInitialSlots = 1024;

/** 64-bit FNV-1a offset basis (14695981039346656037), as high and low 32-bit halves. */
const fnvOffsetHigh = 0xcbf29ce4;
const fnvOffsetLow = 0x84222325;

/**
 * The 64-bit FNV prime is 2^40 + 435. Multiplying by it modulo 2^64 is a shift left by 40 plus a
 * multiply by 435, which 32-bit integer arithmetic does exactly, without BigInt.
 */
const fnvPrimeLowPart = 435;

/** Mask of the low 16 bits, to split a 32-bit half into pieces whose products stay exact. */
const low16Mask = 0xffff;

/** 2^32 as a double, to split and join the halves of 64-bit integers. */
const twoToThe32 = 0x1_0000_0000;

/** 2^-32, to shift a double right by 32 bits with a multiplication, which is exact. */
const twoToTheMinus32 = 1 / twoToThe32;

/** 2^32 mod the row count, to reduce a 64-bit hash from its halves. */
const twoToThe32ModRows = twoToThe32 % fstRegistryRows;

/** Positions of the two halves of a 64-bit hash in its Int32Array. */
const hashHighIndex = 0;
const hashLowIndex = 1;

/** What `find` returns when the registry does not know the node. */
export const notRegistered = -1;

/**
 * The table, shared by every build so that a small build does not pay for allocating and clearing
 * 1.8 MB. Builds are synchronous, so only one uses it at a time; each stamps the rows it touches
 * with its own generation and treats rows with an older stamp as empty.
 */
let sharedTable: Float64Array | undefined;
let lastGeneration = 0;

/**
 * The nodes the registry is asked about, as the builder keeps them: per level of its stack, a
 * final flag, a final output and the transitions' inputs, outputs and target addresses. The
 * registry reads a node in place rather than taking its fields as arguments, because doubles
 * passed to a call that is not inlined are boxed, and it is asked once per node.
 */
export interface NodeLevels {
  readonly isFinal: Uint8Array;
  readonly finalOutput: Float64Array;
  readonly transitionCount: Int32Array;
  readonly inputs: readonly Uint8Array[];
  readonly outputs: readonly Float64Array[];
  readonly targets: readonly Float64Array[];
}

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
  const lowPieceCarry = ((low & low16Mask) * fnvPrimeLowPart) >>> 16;
  const carry = ((low >>> 16) * fnvPrimeLowPart + lowPieceCarry) >>> 16;
  hash[hashLowIndex] = Math.imul(low, fnvPrimeLowPart);
  hash[hashHighIndex] = (Math.imul(high, fnvPrimeLowPart) + carry + (low << 8)) | 0;
}

export class NodeRegistry {
  private readonly table: Float64Array;
  private readonly generation: number;
  /** Transitions of nodes too wide to store inline; it belongs to this build alone. */
  private overflowPool: Float64Array = new Float64Array(fstRegistryOverflowPoolInitialSlots);
  private overflowUsed = 0;
  /**
   * The hash of the node being looked up, as two 32-bit halves. It lives in a typed array because
   * a double stored in an object field is boxed, which would allocate per node.
   */
  private readonly hash = new Int32Array(2);
  /** Where the cell that `find` claimed for an unknown node starts, until `remember` fills it. */
  private claimedCellAt = -1;

  constructor() {
    sharedTable ??= new Float64Array(fstRegistryRows * rowSlots);
    this.table = sharedTable;
    this.generation = ++lastGeneration;
  }

  /**
   * The address of a node equal to the one at `level`, or `notRegistered`. In that case the node
   * has taken the row's least recently used cell, evicting what was there, and the caller must
   * `remember` the address it writes the node to.
   */
  find(nodes: NodeLevels, level: number): number {
    const count = nodes.transitionCount[level];
    const inputs = nodes.inputs[level];
    const outputs = nodes.outputs[level];
    const targets = nodes.targets[level];
    const hash = this.hash;
    hash[hashHighIndex] = fnvOffsetHigh;
    hash[hashLowIndex] = fnvOffsetLow;
    mixHashField(hash, nodes.isFinal[level]);
    mixHashField(hash, nodes.finalOutput[level]);
    for (let index = 0; index < count; index++) {
      mixHashField(hash, inputs[index]);
      mixHashField(hash, outputs[index]);
      mixHashField(hash, targets[index]);
    }
    // The crate reduces the whole u64 modulo the row count: (high * 2^32 + low) mod rows, which is
    // ((high mod rows) * (2^32 mod rows) + low) mod rows, small enough to be exact in a double.
    // Remainders are taken by floor division, which the JIT compiles to a few instructions, where
    // `%` on values above 2^30 can fall back to a slow floating-point remainder.
    const highUnsigned = hash[hashHighIndex] >>> 0;
    const highReduced = highUnsigned - Math.floor(highUnsigned / fstRegistryRows) * fstRegistryRows;
    const combined = highReduced * twoToThe32ModRows + (hash[hashLowIndex] >>> 0);
    const row = combined - Math.floor(combined / fstRegistryRows) * fstRegistryRows;

    const table = this.table;
    const rowStart = row * rowSlots;
    if (table[rowStart + rowGenerationSlot] !== this.generation) {
      // First use of the row in this build: whatever an earlier build left there is not ours.
      table[rowStart + rowGenerationSlot] = this.generation;
      table[rowStart + rowFirstCellSlot] = 0;
      for (let cell = 0; cell < fstRegistryCellsPerRow; cell++) {
        const cellAt = rowStart + rowHeaderSlots + cell * cellSlots;
        table[cellAt + cellAddressSlot] = noAddress;
        table[cellAt + cellOverflowCapacitySlot] = 0;
      }
    }
    // Look in the most recently used cell, then the other; a hit in the other makes it the most
    // recently used. A miss takes the least recently used cell and promotes it.
    const first = table[rowStart + rowFirstCellSlot];
    const mostRecentAt = rowStart + rowHeaderSlots + first * cellSlots;
    if (this.cellHolds(mostRecentAt, nodes, level)) return table[mostRecentAt + cellAddressSlot];
    const other = 1 - first;
    const leastRecentAt = rowStart + rowHeaderSlots + other * cellSlots;
    table[rowStart + rowFirstCellSlot] = other;
    if (this.cellHolds(leastRecentAt, nodes, level)) return table[leastRecentAt + cellAddressSlot];
    this.store(leastRecentAt, nodes, level);
    this.claimedCellAt = leastRecentAt;
    return notRegistered;
  }

  /** Records where the node that `find` did not know was written. */
  remember(address: number): void {
    this.table[this.claimedCellAt + cellAddressSlot] = address;
  }

  /** Whether the cell starting at slot `at` holds the node at `level`, whose hash is in `hash`. */
  private cellHolds(at: number, nodes: NodeLevels, level: number): boolean {
    const table = this.table;
    const count = nodes.transitionCount[level];
    if (
      table[at + cellHashLowSlot] !== this.hash[hashLowIndex] ||
      table[at + cellHashHighSlot] !== this.hash[hashHighIndex] ||
      table[at + cellAddressSlot] === noAddress ||
      table[at + cellShapeSlot] !== count * 2 + nodes.isFinal[level] ||
      table[at + cellFinalOutputSlot] !== nodes.finalOutput[level]
    ) {
      return false;
    }
    const inputs = nodes.inputs[level];
    const outputs = nodes.outputs[level];
    const targets = nodes.targets[level];
    let stored: Float64Array = table;
    let offset = at + cellTransitionsSlot;
    if (count > fstRegistryInlineTransitions) {
      stored = this.overflowPool;
      offset = table[at + cellOverflowAtSlot];
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

  /** Copies the node at `level` (and its hash) into the cell starting at slot `at`. */
  private store(at: number, nodes: NodeLevels, level: number): void {
    const table = this.table;
    const count = nodes.transitionCount[level];
    table[at + cellHashHighSlot] = this.hash[hashHighIndex];
    table[at + cellHashLowSlot] = this.hash[hashLowIndex];
    table[at + cellShapeSlot] = count * 2 + nodes.isFinal[level];
    table[at + cellFinalOutputSlot] = nodes.finalOutput[level];
    let stored: Float64Array = table;
    let offset = at + cellTransitionsSlot;
    if (count > fstRegistryInlineTransitions) {
      if (table[at + cellOverflowCapacitySlot] < count) {
        // Take fresh room from the pool, a power of two so that a cell that sees nodes of growing
        // width moves a handful of times; the room it leaves behind is not reused.
        let capacity = fstRegistryOverflowInitialTransitions;
        while (capacity < count) capacity *= 2;
        table[at + cellOverflowAtSlot] = this.takeOverflow(capacity * 3);
        table[at + cellOverflowCapacitySlot] = capacity;
      }
      stored = this.overflowPool;
      offset = table[at + cellOverflowAtSlot];
    }
    const inputs = nodes.inputs[level];
    const outputs = nodes.outputs[level];
    const targets = nodes.targets[level];
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
      const grown = new Float64Array(capacity);
      grown.set(this.overflowPool);
      this.overflowPool = grown;
    }
    this.overflowUsed = at + slots;
    return at;
  }
}
