// What the crash and power-loss children share: one NDJSON line per step on stdout, a seeded
// xorshift32 generator (so a run can be replayed), and the records of a numbered batch, whose
// payloads say which batch they belong to, their index in it and its size, so the parent can
// check that every batch is whole or absent.

/** Writes one JSON line to stdout. */
export const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

/** A xorshift32 generator of numbers in [0, 1) from `seed` (the crash tests' kill delays too). */
export function xorshift32(seed) {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
}

/** A xorshift32 generator of numbers in [0, 1), seeded by the run's seed and the child's cycle. */
export function seededRandom(cycle, seed) {
  return xorshift32((cycle * 2654435761) ^ seed);
}

/**
 * The child's writer lease: the previous child's token renewed when it is still live, else a
 * new lease, waiting out one a killed child left until it expires. Each grant is emitted.
 */
export async function takeLease(feed, token, holder, ttlMs) {
  try {
    if (!token) throw new Error('no token yet');
    const renewed = await feed.renewLease({ token, ttlMs });
    emit({ kind: 'lease', token, epoch: renewed.epoch });
    return token;
  } catch {
    for (;;) {
      try {
        const granted = await feed.acquireLease({ holder, ttlMs });
        emit({ kind: 'lease', token: granted.token, epoch: granted.epoch });
        return granted.token;
      } catch (error) {
        if (error?.code !== 'LEASE_HELD') throw error;
        await new Promise((resolve) => setTimeout(resolve, Math.max(10, error.details.expiresAt - Date.now())));
      }
    }
  }
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

/**
 * Writes 2 to 8 batches at once (`write`, each batch named `${prefix}.${index}` and made by
 * `makeBatch`), printing an `attempt` line for each first and calling `acknowledged` for each as
 * it resolves: concurrent requests, so the group commit pipelines.
 */
export async function concurrentRound(random, prefix, makeBatch, write, acknowledged) {
  const count = 2 + Math.floor(random() * 7);
  const round = Array.from({ length: count }, (_, index) => {
    const batch = `${prefix}.${index}`;
    return { batch, ...makeBatch(batch) };
  });
  for (const { batch } of round) emit({ kind: 'attempt', batch });
  await Promise.all(round.map(async ({ batch, size, records }) => acknowledged(batch, size, await write(records))));
}

/**
 * `kernels` with a durable write that reports when two writes to one file are in flight at once
 * (a group written behind another whose fdatasync has not returned): `{"kind":"overlap"}` when
 * the second begins, `{"kind":"overlap-end"}` when they no longer overlap. The parent reads the
 * last of these before a kill or a cut to know whether two groups were in flight then.
 */
export function overlapReporting(kernels) {
  const inFlight = new Map();
  const change = (fd, by) => {
    const before = inFlight.get(fd) ?? 0;
    inFlight.set(fd, before + by);
    if (before === 1 && by > 0) emit({ kind: 'overlap' });
    if (before === 2 && by < 0) emit({ kind: 'overlap-end' });
  };
  return {
    ...kernels,
    async writeDurable(fd, position, buffers) {
      change(fd, 1);
      try {
        return await kernels.writeDurable(fd, position, buffers);
      } finally {
        change(fd, -1);
      }
    },
  };
}

/** Whether the child's last overlap report before it stopped said two writes were in flight. */
export function overlappingAtEnd(lines) {
  for (let index = lines.length - 1; index >= 0; index--) {
    if (lines[index].kind === 'overlap') return true;
    if (lines[index].kind === 'overlap-end') return false;
  }
  return false;
}

/** Batches attempted and not acknowledged by the end of the child's lines. */
export function unacknowledged(lines) {
  const open = new Set();
  for (const line of lines) {
    if (line.kind === 'attempt') open.add(line.batch);
    if (line.kind === 'oneshot' || line.kind === 'batch') open.delete(line.batch);
  }
  return open.size;
}
