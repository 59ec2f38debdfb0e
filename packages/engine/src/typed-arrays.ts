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
