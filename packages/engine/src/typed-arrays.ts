/** The typed arrays a growable column can be. */
type GrowableArray = Float64Array | Uint32Array | Uint16Array | Uint8Array | Int32Array;

/**
 * A copy of `array` with room for `length` elements: what a column held in a typed array (one
 * allocation, no object per element for the garbage collector to mark) does when it is full.
 *
 * @example
 * if (count === positions.length) positions = grown(positions, positions.length * 2);
 */
export function grown<T extends GrowableArray>(array: T, length: number): T {
  const larger = new (array.constructor as new (length: number) => T)(length);
  larger.set(array);
  return larger;
}

/** The bytes of the first `count` elements of `array`, as they lie in memory (no copy). */
export function columnBytes(array: GrowableArray, count: number): Uint8Array {
  return new Uint8Array(array.buffer, array.byteOffset, count * array.BYTES_PER_ELEMENT);
}

/**
 * A column of `count` elements made of `bytes` as `columnBytes` gave them (copied: `bytes` may
 * lie anywhere in a file's buffer, and a typed array must start at a multiple of its element
 * size), with room for `capacity`. Undefined when the length does not fit the count.
 */
export function columnOf<T extends GrowableArray>(
  make: new (length: number) => T,
  bytes: Uint8Array,
  count: number,
  capacity = count,
): T | undefined {
  const column = new make(Math.max(capacity, count, 1));
  if (bytes.length !== count * column.BYTES_PER_ELEMENT) return undefined;
  new Uint8Array(column.buffer).set(bytes);
  return column;
}
