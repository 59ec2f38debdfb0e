// The export worker test's feed: enough bytes for two export files (the file size target is
// `exportFileBytesTarget`), so two files are written at once; records with keys, tags, types and
// text payloads with characters JSON escapes, a few payloads repeated (stored once, read from
// elsewhere in their segment). Run by the test's own process on the sources and by a child on
// the built engine: both must write the same files.

/** How both runs open their store: the same clock and stream ids, so the same records. */
export function exportStoreOptions() {
  let id = 0;
  return { segmentBytes: 8 * 1024 * 1024, clock: () => 1_700_000_000_000, newId: () => `id-${++id}` };
}

/** Appends the workload to a new feed `f` of `store`; returns the number of records. */
export async function fillExportFeed(store, fileBytesTarget) {
  const feed = await store.createFeed('f');
  const payloadBytes = 48 * 1024;
  const perCommit = 32;
  const commits = Math.ceil((fileBytesTarget * 1.4) / (payloadBytes * perCommit));
  for (let commit = 0; commit < commits; commit++) {
    await feed.append(
      Array.from({ length: perCommit }, (_, n) => {
        const repeated = n % 8 === 0;
        const head = repeated ? `{"shared":${n}, "text":"tab\\there, quote \\" é"` : `{"commit":${commit},"n":${n},"text":"line\\nbreak"`;
        return {
          payload: `${head},"pad":"${'p'.repeat(payloadBytes - head.length - 10)}"}`,
          key: `k${(commit * perCommit + n) % 997}`,
          type: n % 3 === 0 ? 'created' : 'updated',
          tags: [`t${n % 5}`, `c${commit % 7}`],
        };
      }),
    );
  }
  return commits * perCommit;
}
