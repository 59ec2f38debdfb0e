/**
 * Platform support from the native module that Node.js lacks: an exclusive `flock(2)` on an open
 * descriptor, which the data directory's lock holds on the directory itself for the life of the
 * store. It is not a kernel: it has no TypeScript twin, and it loads whatever `STREAMSTACK_KERNELS`
 * says, so that choosing the TypeScript kernels never weakens the lock. When the native module
 * cannot be loaded, the answer says why, and the caller falls back to what it can do without it.
 *
 * @example
 * const platform = loadPlatformLock();
 * if ('unavailable' in platform) console.warn(platform.unavailable);
 * else if (!platform.lockExclusive(fs.openSync(directory, 'r'))) throw new StreamStackError('LOCKED', 'held elsewhere');
 */
import { StreamStackError } from '../errors.js';
import { type NativeModule, requireNative } from '../kernels/native.js';

/** The native lock calls, with failures as `StreamStackError`s. */
export interface PlatformLock {
  /**
   * Takes an exclusive lock through the open descriptor `fd` without waiting: true when this
   * descriptor now holds it (or already did), false when another open file description holds it,
   * in this process or another. The lock lasts until `unlock`, until the descriptor is closed, or
   * until the process dies. Any other failure (a bad descriptor, say) throws `IO`.
   */
  lockExclusive(fd: number): boolean;
  /** Releases the lock held through `fd`; the descriptor stays open. Throws `IO` on failure. */
  unlock(fd: number): void;
}

/** Why the native lock cannot be had, for the caller to report or fall back on. */
export interface PlatformLockUnavailable {
  readonly unavailable: string;
}

const platformFunctionNames = ['lockExclusive', 'unlock'] as const satisfies readonly (keyof NativeModule)[];

let cached: PlatformLock | PlatformLockUnavailable | undefined;

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The `StreamStackError` for an error thrown by a native lock call. The native side raises `IO`
 * with the errno's name (`errnoName`) and the system call; they go into `details` as `ioError`
 * puts Node's own. Anything else is napi rejecting an argument that is not a number.
 */
function translate(error: unknown): StreamStackError {
  const native = error as { code?: unknown; errnoName?: unknown; syscall?: unknown } | null;
  if (native?.code !== 'IO') {
    return new StreamStackError('INVALID_ARGUMENT', describe(error), { cause: error });
  }
  return new StreamStackError('IO', describe(error), {
    cause: error,
    details: {
      ...(typeof native.errnoName === 'string' ? { errno: native.errnoName } : {}),
      ...(typeof native.syscall === 'string' ? { syscall: native.syscall } : {}),
    },
  });
}

function load(): PlatformLock | PlatformLockUnavailable {
  let native: NativeModule;
  try {
    native = requireNative();
  } catch (error) {
    return { unavailable: describe(error) };
  }
  const missing = platformFunctionNames.filter((name) => typeof native[name] !== 'function');
  if (missing.length > 0) {
    return {
      unavailable:
        `the native module (@streamstack/native) lacks ${missing.join(', ')}, so the build is out ` +
        'of date; run `pnpm build` at the repository root to rebuild it',
    };
  }
  return Object.freeze({
    lockExclusive(fd: number): boolean {
      try {
        return native.lockExclusive(fd);
      } catch (error) {
        throw translate(error);
      }
    },
    unlock(fd: number): void {
      try {
        native.unlock(fd);
      } catch (error) {
        throw translate(error);
      }
    },
  });
}

/**
 * The native `flock` calls, or why they cannot be had. The module is loaded once per process and
 * the answer kept, so every lock in the process sees the same one.
 */
export function loadPlatformLock(): PlatformLock | PlatformLockUnavailable {
  cached ??= load();
  return cached;
}
