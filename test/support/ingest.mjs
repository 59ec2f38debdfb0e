// What the crash and power-loss children share: one NDJSON line per step on stdout, a seeded
// xorshift32 generator (so a run can be replayed), and the records of a numbered batch, whose
// payloads say which batch they belong to, their index in it and its size, so the parent can
// check that every batch is whole or absent.

/** Writes one JSON line to stdout. */
export const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

/** A xorshift32 generator of numbers in [0, 1), seeded by the run's seed and the child's cycle. */
export function seededRandom(cycle, seed) {
  let state = ((cycle * 2654435761) ^ seed) >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
}

/** The records of batch `batch`: 1 to `sizeMax` of them, with padding up to `paddingMax` bytes. */
export function batchRecords(random, batch, sizeMax, paddingMax, keys) {
  const size = 1 + Math.floor(random() * sizeMax);
  const records = Array.from({ length: size }, (_, index) => ({
    payload: `${batch}:${index}:${size}|${'x'.repeat(Math.floor(random() * paddingMax))}`,
    key: `k${Math.floor(random() * keys)}`,
    tags: [`b${batch}`],
  }));
  return { size, records };
}
