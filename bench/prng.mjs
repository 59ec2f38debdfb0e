// A small deterministic pseudo-random generator (mulberry32), shared by the benchmark suites
// and the demo so that every run makes the same data.

/** Returns a function giving numbers in [0, 1), the same sequence for the same seed. */
export function prng(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
