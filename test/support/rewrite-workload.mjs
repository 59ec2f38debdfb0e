// One workload of appends, a merge and a key compaction, run by the rewrite worker test twice:
// in a child process on the built engine (rewrites on their worker) and in the test's own process
// on the sources (rewrites on the calling thread). Everything in it is repeatable — the clock,
// the stream ids, the records — so the two runs must leave the same bytes.
//
// Records: keys updated many times (some versions out of order), tombstones, keyless records,
// and payloads repeated across segments, so that a compaction drops records, retires
// fingerprints later records repeat, and keeps keyless ones.

/** Segments this small roll every few commits. */
export const rewriteWorkloadSegmentBytes = 64 * 1024;

function commitRecords(commit) {
  const records = [];
  for (let index = 0; index < 12; index++) {
    const n = commit * 12 + index;
    const key = `account-${n % 1500}`;
    if (n % 29 === 0)
      records.push({ payload: `closed ${n}`, key, tombstone: true, type: 'closed', tags: ['lifecycle'] });
    else if (n % 5 === 0)
      records.push({ payload: `note ${'.'.repeat(n % 90)} ${n % 7}`, type: 'note', tags: [`bucket:${n % 4}`] });
    else
      records.push({
        payload: `{"balance":${(n * 7919) % 1000},"pad":"${'x'.repeat(200 + (n % 50))}"}`,
        key,
        version: n % 11 === 0 ? 1 : n,
        type: 'update',
        tags: [`region:${n % 6}`, `tier:${n % 3}`],
      });
  }
  return records;
}

/** Runs the workload on `Store` (either build of the engine) in `directory`, with `kernels`. */
export async function rewriteWorkload(Store, directory, kernels) {
  let now = 1_700_000_000_000;
  let id = 0;
  const store = await Store.open(directory, {
    segmentBytes: rewriteWorkloadSegmentBytes,
    kernels,
    clock: () => now,
    newId: () => `id-${++id}`,
  });
  try {
    const feed = await store.createFeed('f');
    for (let commit = 1; commit <= 150; commit++) {
      await feed.append(commitRecords(commit));
      now += 1000;
    }
    const merged = await feed.compact();
    for (let commit = 151; commit <= 260; commit++) {
      await feed.append(commitRecords(commit));
      now += 1000;
    }
    const compacted = await feed.compactKeys({ horizon: 230 });
    const again = await feed.compactKeys({ horizon: 255, keyless: 'drop' });
    // A rewrite builds its segment's derived files itself: none is rebuilt after a switch.
    const rebuiltAfterSwitch = feed.indexRebuilds.filter(
      (rebuild) => rebuild.reason === 'its segment was merged',
    ).length;
    return {
      merges: merged.merges.length,
      compacted: compacted.segmentsCompacted,
      again: again.segmentsCompacted,
      recordsAfter: again.recordsAfter,
      rebuiltAfterSwitch,
    };
  } finally {
    await store.close();
  }
}
