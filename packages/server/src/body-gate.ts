/**
 * A byte semaphore for request bodies parsed at once: a body reserves its size before it is
 * read, and waits in order while the bytes in flight would pass the capacity. A request that
 * waits too long is refused with 503 `UNAVAILABLE` and a retry hint; while it waits, its body
 * stays unread in the socket, where it costs the server nothing.
 */
import { StreamStackError } from '@streamstack/engine';

interface Waiter {
  readonly bytes: number;
  readonly grant: () => void;
}

export class BodyGate {
  private inFlight = 0;
  private readonly waiters: Waiter[] = [];

  /**
   * @param capacityBytes Bytes reserved at once at most (a single body larger than this is let
   *   through alone, so that no body within the body limit waits forever).
   * @param waitMsMax The longest wait for room before `UNAVAILABLE`.
   * @param retryAfterSeconds The retry hint of that refusal.
   */
  constructor(
    readonly capacityBytes: number,
    private readonly waitMsMax: number,
    private readonly retryAfterSeconds: number,
  ) {}

  /** Bytes reserved now (for tests and metrics). */
  get bytesInFlight(): number {
    return this.inFlight;
  }

  /**
   * Runs `read` (which reads a request body) with room reserved for it: its `Content-Length`, or
   * `bodyLimit` when it has none. A declared length over `bodyLimit` is refused at once with
   * `REQUEST_TOO_LARGE`, before anything is read or reserved.
   */
  async reading<T>(contentLength: string | undefined, bodyLimit: number, read: () => Promise<T>): Promise<T> {
    const declared = contentLength === undefined ? Number.NaN : Number(contentLength);
    if (Number.isFinite(declared) && declared > bodyLimit) {
      throw new StreamStackError('REQUEST_TOO_LARGE', `the body is larger than ${bodyLimit} bytes`, {
        details: { bytesMax: bodyLimit },
      });
    }
    const release = await this.acquire(Number.isFinite(declared) ? declared : bodyLimit);
    try {
      return await read();
    } finally {
      release();
    }
  }

  /** Reserves `bytes`; resolves with the release (call it once, when the body is parsed or failed). */
  async acquire(bytes: number): Promise<() => void> {
    if (this.waiters.length === 0 && this.fits(bytes)) return this.take(bytes);
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        bytes,
        grant: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(
          new StreamStackError(
            'UNAVAILABLE',
            `the server is parsing ${this.inFlight} bytes of request bodies already; send this one again shortly`,
            {
              details: { reason: 'bodies-in-flight', retryAfterSeconds: this.retryAfterSeconds },
            },
          ),
        );
        // The head of the line may have gone: those behind it may fit now.
        this.wake();
      }, this.waitMsMax);
      this.waiters.push(waiter);
    });
    // wake() reserved the bytes when it granted them.
    return this.releaser(bytes);
  }

  private fits(bytes: number): boolean {
    return this.inFlight === 0 || this.inFlight + bytes <= this.capacityBytes;
  }

  private take(bytes: number): () => void {
    this.inFlight += bytes;
    return this.releaser(bytes);
  }

  private releaser(bytes: number): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inFlight -= bytes;
      this.wake();
    };
  }

  /** Grants waiters in order while they fit (reserving for each before the next is looked at). */
  private wake(): void {
    while (this.waiters.length > 0 && this.fits(this.waiters[0]!.bytes)) {
      const waiter = this.waiters.shift()!;
      // Reserved here, not when the waiter resumes, so that two wakes cannot both admit it.
      this.inFlight += waiter.bytes;
      waiter.grant();
    }
  }
}
