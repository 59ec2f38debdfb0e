/**
 * Asynchronous work over many items with a few in flight at once: each small file read waits for
 * a trip through the thread pool, so reading the heads of hundreds of files one after another
 * costs that trip hundreds of times, while reading them all at once would take the pool from
 * every other read and write of the process.
 *
 * @example
 * const heads = await mapInFlight(bases, headReadsInFlightMax, (base) => readHead(base));
 */

/** `work` over `items`, at most `inFlight` at once; the results in the items' order. */
export async function mapInFlight<T, R>(
  items: readonly T[],
  inFlight: number,
  work: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index], index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(inFlight, items.length) }, worker));
  return results;
}
