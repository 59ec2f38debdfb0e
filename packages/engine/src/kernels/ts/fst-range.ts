/**
 * Ordered range and prefix scans over an FST in the `fst` crate's format.
 *
 * A scan is a depth-first walk that visits transitions in input order, so keys come out sorted.
 * Along the lower bound's path it skips the transitions that sort before the bound; it reports a
 * final node's key when the key is in range, and stops for good at the first key past the upper
 * bound, since every later key is greater.
 *
 * The walk is the native twin's, step for step, and reads nodes through the crate's rules (see
 * fst-read.ts), so the two agree on corrupt files as well as sound ones. Corrupt files cannot make
 * it run away: it refuses a transition that does not point to a lower address (in a sound file
 * every node is written after its children), so every path ends; it reports no more keys than the
 * footer counts; and it has a step budget between two reported keys (see below).
 */
import { StreamStackError } from '../../errors.js';
import type { FstEntries, FstRange } from '../kernels.js';
import {
  commonInputByIndex,
  emptyFinalAddress,
  packedIntegerMaxBytes,
  stateFinalFlag,
  stateLowBitsMask,
  stateOneTransition,
  stateOneTransitionNext,
} from './fst-format.js';
import {
  anyNodeTransitionCount,
  checkNode,
  corrupt,
  finalOutputOf,
  footerKeyCount,
  malformedNode,
  openFst,
  readPacked,
  transitionIndexBytesOf,
  transitionTarget,
  unsafeValue,
} from './fst-read.js';

/**
 * A scan may take at most this many steps (node pushes and pops) per byte of the file between two
 * keys it reports. In a sound file every node leads to some key, so two keys are at most one climb
 * and one descent apart, each no longer than the deepest path, itself shorter than the file: two
 * steps per byte would do. The margin is wide so that a corrupt file the native twin (which has no
 * budget) walks to the end is walked to the end here too; the budget only cuts off walks that
 * would take exponentially long.
 */
export const fstRangeStepsPerFileByte = 16;

/** Steps a scan may always take between two keys, on top of the per-byte budget. */
export const fstRangeSlackSteps = 65_536;

/** Entries a result has room for before its buffers first grow. */
export const fstRangeInitialEntries = 64;

/** Key bytes per entry a result first reserves room for. */
export const fstRangeInitialKeyBytesPerEntry = 16;

/** Depth the scan's path starts with room for; it doubles as keys get longer. */
export const fstRangeInitialPathLevels = 64;

// Node layouts once decoded: the sentinel empty final node, the two one-transition layouts, and
// the "any transitions" layout.
const kindEmptyFinal = 0;
const kindOneToPrevious = 1;
const kindOne = 2;
const kindAny = 3;

/**
 * A decoded node on the scan's path and the scan's place in it. It keeps only small integers
 * (positions and sizes), because a double stored in an object field is boxed and would allocate
 * per node; outputs are read on demand.
 */
class NodeCursor {
  address = emptyFinalAddress;
  kind = kindEmptyFinal;
  isFinal = false;
  count = 0;
  /** The next transition to follow. */
  next = 0;
  /** Whether the key down to this node equals the lower bound's bytes of the same length. */
  onLowerBound = false;
  // Where the layouts keep their parts: the input of a one-transition node; the pack sizes; for
  // the "any" layout, where its inputs end (they run backwards from there, last transition first)
  // and where the node begins.
  singleInput = 0;
  sizesAt = 0;
  deltaSize = 0;
  outputSize = 0;
  inputsEnd = 0;
  nodeStart = 0;
  // The transition `loadTransition` last read: its input and target (its output goes to a
  // Float64Array, since it may not be a small integer).
  transitionInput = 0;
  transitionTarget = emptyFinalAddress;

  /** Decodes the node at `address`, failing where the crate's `Node::new` would. */
  decode(data: Uint8Array, version: number, address: number): void {
    checkNode(data, version, address);
    this.address = address;
    this.next = 0;
    if (address === emptyFinalAddress) {
      this.kind = kindEmptyFinal;
      this.isFinal = true;
      this.count = 0;
      return;
    }
    const state = data[address];
    const tag = state >>> 6;
    const lowBits = state & stateLowBitsMask;
    if (tag === stateOneTransitionNext || tag === stateOneTransition) {
      this.kind = tag === stateOneTransitionNext ? kindOneToPrevious : kindOne;
      this.isFinal = false;
      this.count = 1;
      const inputAt = lowBits !== 0 ? address : address - 1;
      this.singleInput = lowBits !== 0 ? commonInputByIndex[lowBits - 1] : data[inputAt];
      this.sizesAt = inputAt - 1;
      if (tag === stateOneTransition) {
        this.deltaSize = data[this.sizesAt] >>> 4;
        this.outputSize = data[this.sizesAt] & 0x0f;
      }
      return;
    }
    const count = anyNodeTransitionCount(data, address, state);
    const sizesAt = lowBits !== 0 ? address - 1 : address - 2;
    const sizes = data[sizesAt];
    const indexBytes = transitionIndexBytesOf(version, count);
    this.kind = kindAny;
    this.isFinal = (state & stateFinalFlag) !== 0;
    this.count = count;
    this.sizesAt = sizesAt;
    this.deltaSize = sizes >>> 4;
    this.outputSize = sizes & 0x0f;
    this.inputsEnd = sizesAt - indexBytes;
    const outputsEnd = this.inputsEnd - count * (1 + this.deltaSize);
    this.nodeStart = outputsEnd - count * this.outputSize - (this.isFinal ? this.outputSize : 0);
  }

  /**
   * Reads transition `index` as the crate's `Node::transition` does (input, output, target),
   * failing where it would panic. Leaves the input and target in fields and the output in
   * `output[0]`.
   */
  loadTransition(data: Uint8Array, index: number, output: Float64Array): void {
    const address = this.address;
    if (this.kind === kindOneToPrevious) {
      this.transitionInput = this.singleInput;
      output[0] = 0;
      this.transitionTarget = this.sizesAt;
      return;
    }
    const deltaSize = this.deltaSize;
    const outputSize = this.outputSize;
    let deltaAt: number;
    let outputAt: number;
    let nodeStart: number;
    if (this.kind === kindOne) {
      this.transitionInput = this.singleInput;
      deltaAt = this.sizesAt - deltaSize;
      outputAt = deltaAt - outputSize;
      nodeStart = outputAt;
    } else {
      const inputAt = this.inputsEnd - 1 - index;
      if (inputAt < 0) throw malformedNode(address);
      this.transitionInput = data[inputAt];
      const deltasEnd = this.inputsEnd - this.count;
      deltaAt = deltasEnd - (index + 1) * deltaSize;
      outputAt = deltasEnd - this.count * deltaSize - (index + 1) * outputSize;
      nodeStart = this.nodeStart;
    }
    if (outputSize === 0) {
      output[0] = 0;
    } else {
      if (outputSize > packedIntegerMaxBytes || outputAt < 0) throw malformedNode(address);
      output[0] = readPacked(data, outputAt, outputSize);
    }
    if (deltaSize === 0 || deltaSize > packedIntegerMaxBytes || deltaAt < 0) {
      throw malformedNode(address);
    }
    this.transitionTarget = transitionTarget(data, deltaAt, deltaSize, nodeStart);
  }
}

/** Collects a scan's entries into growable buffers, trimmed when done. */
class EntryCollector {
  private bytes = new Uint8Array(fstRangeInitialEntries * fstRangeInitialKeyBytesPerEntry);
  private byteLength = 0;
  private ends = new Uint32Array(fstRangeInitialEntries);
  private values = new Float64Array(fstRangeInitialEntries);
  count = 0;

  add(key: Uint8Array, keyLength: number, value: number): void {
    if (this.byteLength + keyLength > this.bytes.length) {
      const grown = new Uint8Array(Math.max(this.bytes.length * 2, this.byteLength + keyLength));
      grown.set(this.bytes.subarray(0, this.byteLength));
      this.bytes = grown;
    }
    if (this.count === this.ends.length) {
      const ends = new Uint32Array(this.count * 2);
      ends.set(this.ends);
      this.ends = ends;
      const values = new Float64Array(this.count * 2);
      values.set(this.values);
      this.values = values;
    }
    this.bytes.set(key.subarray(0, keyLength), this.byteLength);
    this.byteLength += keyLength;
    this.ends[this.count] = this.byteLength;
    this.values[this.count] = value;
    this.count++;
  }

  finish(): FstEntries {
    return {
      bytes: this.bytes.slice(0, this.byteLength),
      ends: this.ends.slice(0, this.count),
      values: this.values.slice(0, this.count),
    };
  }
}

/** A bound on keys: its bytes, and whether a key equal to them is inside. */
interface Bound {
  readonly bytes: Uint8Array;
  readonly inclusive: boolean;
}

/** One scan: the path from the root as cursors, the key it spells, and the outputs along it. */
class RangeScan {
  private readonly cursors: NodeCursor[] = [new NodeCursor()];
  /** `key[0, depth)` is the key spelled down to the cursor at `depth`. */
  private key = new Uint8Array(fstRangeInitialPathLevels);
  /** `pathOutputs[depth]` is the sum of the outputs on the way to the cursor at `depth`. */
  private pathOutputs = new Float64Array(fstRangeInitialPathLevels);
  private readonly transitionOutput = new Float64Array(1);
  readonly entries = new EntryCollector();

  constructor(
    private readonly data: Uint8Array,
    private readonly version: number,
    private readonly lower: Bound | null,
    private readonly upper: Bound | null,
  ) {}

  /** Walks from the root until `limit` entries, the upper bound, or the end of the FST. */
  run(rootAddress: number, limit: number): void {
    const data = this.data;
    const lower = this.lower;
    const stepBudget = fstRangeStepsPerFileByte * data.length + fstRangeSlackSteps;
    let steps = 0;
    const root = this.cursors[0];
    root.decode(data, this.version, rootAddress);
    root.onLowerBound = lower !== null;
    let top = 0;
    let arrived = true;
    while (top >= 0) {
      if (++steps > stepBudget) {
        throw corrupt('a range scan found no keys where the file promises some');
      }
      const cursor = this.cursors[top];
      if (arrived) {
        // First visit: is the key down to here an entry, and where do the transitions start?
        arrived = false;
        const notBelowLower = lower === null || !cursor.onLowerBound || (top === lower.bytes.length && lower.inclusive);
        if (cursor.isFinal && notBelowLower) {
          if (this.pastUpper(top)) return;
          const value = this.pathOutputs[top] + finalOutputOf(data, this.version, cursor.address);
          if (value > Number.MAX_SAFE_INTEGER) throw unsafeValue();
          this.entries.add(this.key, top, value);
          steps = 0;
          if (this.entries.count >= limit) return;
        }
        if (lower !== null && cursor.onLowerBound && top < lower.bytes.length) {
          // Skip the transitions below the bound's next byte. The crate reads each whole
          // transition on the way, and so must we, to fail where it fails.
          const wanted = lower.bytes[top];
          let index = 0;
          while (index < cursor.count) {
            cursor.loadTransition(data, index, this.transitionOutput);
            if (cursor.transitionInput >= wanted) break;
            index++;
          }
          cursor.next = index;
        }
      }
      if (cursor.next >= cursor.count) {
        top--;
        continue;
      }
      const index = cursor.next++;
      cursor.loadTransition(data, index, this.transitionOutput);
      const input = cursor.transitionInput;
      const target = cursor.transitionTarget;
      // A negative target stands for a u64 that wrapped past zero, which is a huge address.
      if (target < 0 || target >= cursor.address) {
        throw corrupt(`node ${cursor.address} has a transition to ${target}, not to a lower address`, {
          address: cursor.address,
          target,
        });
      }
      const childDepth = top + 1;
      if (childDepth === this.cursors.length) this.cursors.push(new NodeCursor());
      if (childDepth >= this.key.length) this.growPath();
      const child = this.cursors[childDepth];
      child.decode(data, this.version, target);
      const pathOutput = this.pathOutputs[top] + this.transitionOutput[0];
      if (pathOutput > Number.MAX_SAFE_INTEGER) throw unsafeValue();
      child.onLowerBound =
        lower !== null && cursor.onLowerBound && top < lower.bytes.length && lower.bytes[top] === input;
      this.pathOutputs[childDepth] = pathOutput;
      this.key[top] = input;
      top = childDepth;
      arrived = true;
    }
  }

  /** Whether the key `key[0, length)` is past the upper bound. */
  private pastUpper(length: number): boolean {
    const upper = this.upper;
    if (upper === null) return false;
    const bound = upper.bytes;
    const shorter = Math.min(length, bound.length);
    for (let index = 0; index < shorter; index++) {
      if (this.key[index] !== bound[index]) return this.key[index] > bound[index];
    }
    return length > bound.length || (length === bound.length && !upper.inclusive);
  }

  private growPath(): void {
    const key = new Uint8Array(this.key.length * 2);
    key.set(this.key);
    this.key = key;
    const pathOutputs = new Float64Array(this.pathOutputs.length * 2);
    pathOutputs.set(this.pathOutputs);
    this.pathOutputs = pathOutputs;
  }
}

/** Byte strings compared lexicographically, as the crate (and Rust's slices) compare them. */
function compareBytes(left: Uint8Array, right: Uint8Array): number {
  const shorter = Math.min(left.length, right.length);
  for (let index = 0; index < shorter; index++) {
    if (left[index] !== right[index]) return left[index] - right[index];
  }
  return left.length - right.length;
}

/**
 * The smallest byte string greater than every string that starts with `prefix`: drop trailing
 * 0xff bytes, then add one to the last byte. Null when the prefix is all 0xff, since then none is.
 */
function prefixSuccessor(prefix: Uint8Array): Uint8Array | null {
  let length = prefix.length;
  while (length > 0 && prefix[length - 1] === 0xff) length--;
  if (length === 0) return null;
  const successor = prefix.slice(0, length);
  successor[length - 1]++;
  return successor;
}

/**
 * The entries in `range`, in key order. Bounds combine: where two lower (or two upper) bounds
 * apply, including the ones a prefix implies, the tighter one wins.
 */
export function fstRange(fst: Uint8Array, range: FstRange): FstEntries {
  const requestedLimit = range.limit ?? Number.POSITIVE_INFINITY;
  const unlimited = requestedLimit === Number.POSITIVE_INFINITY;
  if (!(unlimited || (Number.isSafeInteger(requestedLimit) && requestedLimit >= 0))) {
    throw new StreamStackError('INVALID_ARGUMENT', `fstRange limit ${requestedLimit} is not a non-negative integer`, {
      details: { limit: requestedLimit },
    });
  }
  const rootAddress = openFst(fst);
  const version = fst[0];
  // A sound FST has exactly as many keys as its footer counts, so a scan never needs to report
  // more; a corrupt one that holds more is cut off there, as the native twin does.
  const keyCount = footerKeyCount(fst);
  const limit = Math.min(requestedLimit, keyCount);

  let lower: Bound | null = null;
  let upper: Bound | null = null;
  if (range.gte !== undefined) lower = tighterLower(lower, { bytes: range.gte, inclusive: true });
  if (range.gt !== undefined) lower = tighterLower(lower, { bytes: range.gt, inclusive: false });
  if (range.lte !== undefined) upper = tighterUpper(upper, { bytes: range.lte, inclusive: true });
  if (range.lt !== undefined) upper = tighterUpper(upper, { bytes: range.lt, inclusive: false });
  if (range.prefix !== undefined) {
    // The keys that start with a prefix are those from the prefix up to its successor.
    lower = tighterLower(lower, { bytes: range.prefix, inclusive: true });
    const successor = prefixSuccessor(range.prefix);
    if (successor !== null) upper = tighterUpper(upper, { bytes: successor, inclusive: false });
  }

  const scan = new RangeScan(fst, version, lower, upper);
  if (limit > 0) scan.run(rootAddress, limit);
  return scan.entries.finish();
}

/** The tighter of two lower bounds: the greater; exclusive when they are equal and either is. */
function tighterLower(current: Bound | null, candidate: Bound): Bound {
  if (current === null) return candidate;
  const order = compareBytes(current.bytes, candidate.bytes);
  if (order !== 0) return order < 0 ? candidate : current;
  return { bytes: current.bytes, inclusive: current.inclusive && candidate.inclusive };
}

/** The tighter of two upper bounds: the smaller; exclusive when they are equal and either is. */
function tighterUpper(current: Bound | null, candidate: Bound): Bound {
  if (current === null) return candidate;
  const order = compareBytes(current.bytes, candidate.bytes);
  if (order !== 0) return order < 0 ? current : candidate;
  return { bytes: current.bytes, inclusive: current.inclusive && candidate.inclusive };
}
