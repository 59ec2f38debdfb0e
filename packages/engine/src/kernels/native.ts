/**
 * The native kernel set: the napi-rs module `@streamstack/native` (built from `native/`) adapted
 * to the `Kernels` interface. The adapter only reshapes arguments and turns every error the module
 * throws into a `StreamStackError` with the same code; the native functions put that code in the
 * error's `code` property themselves.
 *
 * @example
 * const kernels = loadNativeKernels(); // throws NATIVE_UNAVAILABLE when the module is not built
 * kernels.crc32(new TextEncoder().encode('hello')); // 907060870
 */
import { createRequire } from 'node:module';
import { type ErrorCode, StreamStackError } from '../errors.js';
import type { FstEntries, FstRange, Kernels, NdjsonColumns, PackedBytes } from './kernels.js';
import type { ManifestDecodeJob } from './manifest-columns.js';
import { checkCopyRange } from './ts/copy.js';

/**
 * The functions `@streamstack/native` exports, as this adapter and `storage/platform.ts` call them
 * (see native/src/lib.rs).
 */
export interface NativeModule {
  crc32(bytes: Uint8Array, seed?: number): number;
  crc32c(bytes: Uint8Array, seed?: number): number;
  crc32cRangesInto(bytes: Uint8Array, ranges: Uint32Array, out: Uint32Array): void;
  payloadChecksumsInto(bytes: Uint8Array, ranges: Uint32Array, out: Uint32Array): void;
  copyRange(target: Uint8Array, targetAt: number, source: Uint8Array, start: number, end: number): void;
  frameChecksumsWrite(buffer: Uint8Array, frameOffsets: Uint32Array): void;
  frameChecksumsVerify(buffer: Uint8Array, frameOffsets: Uint32Array): number;
  fstBuild(keys: Uint8Array, ends: Uint32Array, values: Float64Array): Uint8Array;
  fstVerify(fst: Uint8Array): void;
  fstLength(fst: Uint8Array): number;
  fstGet(fst: Uint8Array, key: Uint8Array): number | null;
  fstGetMany(fst: Uint8Array, keys: Uint8Array, ends: Uint32Array): Float64Array;
  ndjsonLinesInto(columns: NdjsonColumns, out: Uint8Array): number;
  decodeManifests(
    bytes: Uint8Array,
    frames: Uint32Array,
    runs: Uint32Array,
    place: string,
    rows: number,
    cursor: Uint32Array,
    columns: Uint8Array,
    tagStarts: Uint32Array,
    tagEnds: Uint32Array,
    typeRanges: Uint32Array,
    external: Float64Array,
  ): void;
  fstRange(
    fst: Uint8Array,
    gte: Uint8Array | undefined,
    gt: Uint8Array | undefined,
    lte: Uint8Array | undefined,
    lt: Uint8Array | undefined,
    prefix: Uint8Array | undefined,
    limit: number | undefined,
  ): FstEntries;
  postingsEncode(positions: Uint32Array): Uint8Array;
  postingsDecode(encoded: Uint8Array): Uint32Array;
  intersect(a: Uint32Array, b: Uint32Array): Uint32Array;
  union(a: Uint32Array, b: Uint32Array): Uint32Array;
  writeDirect(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void>;
  writeDurable(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void>;
  // Platform support, not kernels: `storage/platform.ts` calls these whatever the kernel choice.
  lockExclusive(fd: number): boolean;
  unlock(fd: number): void;
}

const nativeFunctionNames: readonly (keyof NativeModule)[] = [
  'crc32',
  'crc32c',
  'crc32cRangesInto',
  'payloadChecksumsInto',
  'copyRange',
  'frameChecksumsWrite',
  'frameChecksumsVerify',
  'fstBuild',
  'fstVerify',
  'fstLength',
  'fstGet',
  'fstGetMany',
  'fstRange',
  'ndjsonLinesInto',
  'decodeManifests',
  'postingsEncode',
  'postingsDecode',
  'intersect',
  'union',
  'writeDurable',
  'writeDirect',
];

/** The codes the native module raises itself; anything else is napi rejecting an argument. */
const nativeCodes: ReadonlySet<string> = new Set<ErrorCode>([
  'INVALID_ARGUMENT',
  'FST_KEY_ORDER',
  'POSTINGS_NOT_SORTED',
  'CORRUPT',
  'IO',
]);

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The `StreamStackError` for an error thrown by native code. napi-rs's own argument conversions
 * throw with codes like `InvalidArg` or `NumberExpected`; those are `INVALID_ARGUMENT`.
 */
function translate(error: unknown): StreamStackError {
  const code = (error as { code?: unknown } | null)?.code;
  const resolved: ErrorCode =
    typeof code === 'string' && nativeCodes.has(code) ? (code as ErrorCode) : 'INVALID_ARGUMENT';
  return new StreamStackError(resolved, describe(error), { cause: error });
}

/**
 * A native write started by `start`, its errors as `StreamStackError`s: argument errors (a
 * position that is not a byte offset) are thrown before any I/O; every rejection is a failed
 * system call, whose errno's name (`errnoName`) is offered in `details.errno` as the TypeScript
 * twins do with Node's code.
 */
function settleWrite(start: () => Promise<void>): Promise<void> {
  let pending: Promise<void>;
  try {
    pending = start();
  } catch (error) {
    return Promise.reject(translate(error));
  }
  return pending.then(undefined, (error: unknown) => {
    const errno = (error as { errnoName?: unknown } | null)?.errnoName;
    throw new StreamStackError('IO', describe(error), {
      cause: error,
      details: typeof errno === 'string' ? { errno } : {},
    });
  });
}

/**
 * What to do when the binary cannot be found. Installed from the registry, the binary comes in a
 * platform package (`@streamstack/native-linux-x64-gnu`, the one prebuilt), an optional dependency
 * that the package manager skips on other platforms or when told to omit optional dependencies;
 * in the repository it is built next to native/index.js.
 */
const unavailableHint =
  'installed packages need the platform package @streamstack/native-linux-x64-gnu (x64 Linux with ' +
  `glibc only; this is ${process.platform}-${process.arch}), and the repository needs \`pnpm build\` ` +
  'at its root; without it, `auto` uses the TypeScript kernels';

/**
 * Loads `@streamstack/native`, checking that it has every kernel; throws `NATIVE_UNAVAILABLE` if
 * it cannot. Also used by `storage/platform.ts`, which checks the platform functions itself.
 *
 * The package's generated napi-rs loader (native/index.js) looks for the binary twice: first next
 * to itself, where `napi build` puts it in the repository, then in the platform package for this
 * machine, which is where an install from the registry or from tarballs has it.
 */
export function requireNative(): NativeModule {
  const require = createRequire(import.meta.url);
  let loaded: Partial<NativeModule>;
  try {
    loaded = require('@streamstack/native') as Partial<NativeModule>;
  } catch (error) {
    throw new StreamStackError(
      'NATIVE_UNAVAILABLE',
      `the native kernels (@streamstack/native) could not be loaded (${describe(error).replace(/\.$/, '')}); ${unavailableHint}`,
      { cause: error },
    );
  }
  const missing = nativeFunctionNames.filter((name) => typeof loaded[name] !== 'function');
  if (missing.length > 0) {
    throw new StreamStackError(
      'NATIVE_UNAVAILABLE',
      `the native kernels (@streamstack/native) lack ${missing.join(', ')}, so the build is out ` +
        'of date; run `pnpm build` at the repository root to rebuild them',
      { details: { missing } },
    );
  }
  return loaded as NativeModule;
}

/**
 * Where the checksum kernels write their results: one buffer, made once and outside the V8 heap,
 * viewed at the length a call needs and copied out after it. A typed array made by Rust, or a
 * small one made fresh by JS (V8 keeps those on its heap and must move one off it before native
 * code may see its bytes), costs a few microseconds a call — more than the CRCs of a small run.
 */
let scratch = new Uint32Array(new ArrayBuffer(4096));

function scratchOutput(length: number): Uint32Array {
  if (scratch.length < length) scratch = new Uint32Array(new ArrayBuffer(4 * Math.max(length, 2 * scratch.length)));
  return scratch.subarray(0, length);
}

/**
 * `call` with every error it throws turned into a `StreamStackError` by `translate`. The wrapper
 * is made once, when the kernels are loaded, so a call allocates nothing; try/catch costs nothing
 * in optimized code on the happy path.
 */
function translatingErrors<Args extends unknown[], Result>(call: (...args: Args) => Result): (...args: Args) => Result {
  return (...args: Args): Result => {
    try {
      return call(...args);
    } catch (error) {
      throw translate(error);
    }
  };
}

/** Loads the native module and returns it as a `Kernels`; throws `NATIVE_UNAVAILABLE` if it cannot. */
export function loadNativeKernels(): Kernels {
  const native = requireNative();
  const nativeCopyRange = translatingErrors(
    (target: Uint8Array, targetAt: number, source: Uint8Array, start: number, end: number): void =>
      native.copyRange(target, targetAt, source, start, end),
  );
  return Object.freeze({
    name: 'native' as const,
    crc32: translatingErrors((bytes: Uint8Array, seed?: number): number => native.crc32(bytes, seed)),
    crc32c: translatingErrors((bytes: Uint8Array, seed?: number): number => native.crc32c(bytes, seed)),
    crc32cRanges: translatingErrors((bytes: Uint8Array, ranges: Uint32Array, given?: Uint32Array): Uint32Array => {
      const out = given ?? scratchOutput(ranges.length >>> 1);
      native.crc32cRangesInto(bytes, ranges, out);
      return given ?? out.slice();
    }),
    payloadChecksums: translatingErrors((bytes: Uint8Array, ranges: Uint32Array, given?: Uint32Array): Uint32Array => {
      const out = given ?? scratchOutput(ranges.length & ~1);
      native.payloadChecksumsInto(bytes, ranges, out);
      return given ?? out.slice();
    }),
    copyRange(target: Uint8Array, targetAt: number, source: Uint8Array, start: number, end: number): void {
      // Checked here, as the twin checks, because napi would wrap a negative or fractional
      // number into a u32 rather than refuse it. The check's own errors pass through untouched.
      checkCopyRange(target, targetAt, source, start, end);
      // Two views of one buffer may overlap, and Rust may not hold both; `set` copies them right.
      if (target.buffer === source.buffer) {
        target.set(source.subarray(start, end), targetAt);
        return;
      }
      nativeCopyRange(target, targetAt, source, start, end);
    },
    ndjsonLines: translatingErrors((columns: NdjsonColumns, out: Uint8Array): number =>
      native.ndjsonLinesInto(columns, out),
    ),
    // Positional arguments: an object's fields cost more to cross than a small batch to decode.
    decodeManifests: translatingErrors((job: ManifestDecodeJob): void =>
      native.decodeManifests(
        job.bytes,
        job.frames,
        job.runs,
        job.place,
        job.rows,
        job.cursor,
        job.columns,
        job.tagStarts,
        job.tagEnds,
        job.typeRanges,
        job.external,
      ),
    ),
    frameChecksumsWrite: translatingErrors((buffer: Uint8Array, frameOffsets: Uint32Array): void =>
      native.frameChecksumsWrite(buffer, frameOffsets),
    ),
    frameChecksumsVerify: translatingErrors((buffer: Uint8Array, frameOffsets: Uint32Array): number =>
      native.frameChecksumsVerify(buffer, frameOffsets),
    ),
    fstBuild: translatingErrors(
      (keys: PackedBytes, values: Float64Array): Uint8Array => native.fstBuild(keys.bytes, keys.ends, values),
    ),
    fstVerify: translatingErrors((fst: Uint8Array): void => native.fstVerify(fst)),
    fstLength: translatingErrors((fst: Uint8Array): number => native.fstLength(fst)),
    fstGet: translatingErrors(
      (fst: Uint8Array, key: Uint8Array): number | undefined => native.fstGet(fst, key) ?? undefined,
    ),
    fstGetMany: translatingErrors(
      (fst: Uint8Array, keys: PackedBytes): Float64Array => native.fstGetMany(fst, keys.bytes, keys.ends),
    ),
    fstRange: translatingErrors(
      (fst: Uint8Array, range: FstRange): FstEntries =>
        native.fstRange(fst, range.gte, range.gt, range.lte, range.lt, range.prefix, range.limit),
    ),
    postingsEncode: translatingErrors((positions: Uint32Array): Uint8Array => native.postingsEncode(positions)),
    postingsDecode: translatingErrors((encoded: Uint8Array): Uint32Array => native.postingsDecode(encoded)),
    intersect: translatingErrors((a: Uint32Array, b: Uint32Array): Uint32Array => native.intersect(a, b)),
    union: translatingErrors((a: Uint32Array, b: Uint32Array): Uint32Array => native.union(a, b)),
    writeDurable(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void> {
      return settleWrite(() => native.writeDurable(fd, position, buffers));
    },
    directWrites: true,
    writeDirect(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void> {
      return settleWrite(() => native.writeDirect(fd, position, buffers));
    },
  });
}
