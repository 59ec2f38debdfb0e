/**
 * The typed state logs of a feed (compaction, merge and retention: `storage/record-log.ts`):
 * each record's bytes are what earlier builds wrote, they read back as written, and a sound
 * record of a version this build does not know is `CORRUPT` in every one of them, with a message
 * that names the file.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CompactionLog } from '../../packages/engine/src/coordinator/maintenance/compaction-state.js';
import { MergeLog } from '../../packages/engine/src/coordinator/maintenance/merge-state.js';
import { RetentionLog } from '../../packages/engine/src/coordinator/maintenance/retention-state.js';
import { isStreamStackError } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { StateLog } from '../../packages/engine/src/storage/state-log.js';
import { temporaryDirectory } from '../support/store.js';

const stateFile = (directory: string, name: string) => path.join(directory, 'state', name);

/** The raw records (sequence numbers stripped) that a log's first file holds. */
async function rawNewest(directory: string, name: string): Promise<number[]> {
  const log = await StateLog.open(tsKernels, stateFile(directory, name), true);
  try {
    return [...(log.last ?? [])];
  } finally {
    log.close();
  }
}

/** Writes `bytes` as the newest sound record of a log (both files, CRCs and sequence right). */
async function writeRaw(directory: string, name: string, bytes: number[]): Promise<void> {
  const log = await StateLog.open(tsKernels, stateFile(directory, name));
  try {
    await log.write(Uint8Array.from(bytes));
  } finally {
    log.close();
  }
}

/** The error an open fails with. */
async function openError(open: () => Promise<{ close(): void }>): Promise<unknown> {
  try {
    (await open()).close();
  } catch (error) {
    return error;
  }
  throw new Error('the open succeeded');
}

const logs = [
  { name: 'compaction.log', kind: 'compaction', open: CompactionLog.open },
  { name: 'merge.log', kind: 'merge', open: MergeLog.open },
  { name: 'retention.log', kind: 'retention', open: RetentionLog.open },
] as const;

describe('typed state logs', () => {
  it('write the bytes earlier builds wrote, and read them back', async () => {
    const directory = temporaryDirectory();
    const compaction = await CompactionLog.open(tsKernels, directory, false);
    await compaction.write({ horizon: 200 });
    compaction.close();
    const merge = await MergeLog.open(tsKernels, directory, false);
    await merge.write({ replaced: [1, 300], capacity: 65536, pending: true });
    merge.close();
    const retention = await RetentionLog.open(tsKernels, directory, false);
    await retention.write({
      policy: { maxRecords: 5, maxBytes: 129 },
      floor: { commit: 7, position: 40 },
      pending: false,
    });
    retention.close();

    // Version 1, then each kind's fields (varints are little-endian base 128).
    expect(await rawNewest(directory, 'compaction.log')).toEqual([1, 0xc8, 0x01]);
    expect(await rawNewest(directory, 'merge.log')).toEqual([1, 1, 0x80, 0x80, 0x04, 2, 1, 0xac, 0x02]);
    expect(await rawNewest(directory, 'retention.log')).toEqual([1, 6, 5, 0x81, 0x01, 7, 40, 0]);

    const reopened = {
      compaction: await CompactionLog.open(tsKernels, directory, true),
      merge: await MergeLog.open(tsKernels, directory, true),
      retention: await RetentionLog.open(tsKernels, directory, true),
    };
    expect(reopened.compaction.horizon).toBe(200);
    expect(reopened.merge.record).toEqual({ replaced: [1, 300], capacity: 65536, pending: true });
    expect(reopened.retention.state).toEqual({
      policy: { maxRecords: 5, maxBytes: 129 },
      floor: { commit: 7, position: 40 },
      pending: false,
    });
    expect(reopened.retention.recorded).toBe(true);
    for (const log of Object.values(reopened)) {
      expect(log.corruptions).toEqual([]);
      expect(log.tornTails).toEqual([]);
      log.close();
    }
  });

  it('hold nothing and make no files until their first write', async () => {
    const directory = temporaryDirectory();
    const compaction = await CompactionLog.open(tsKernels, directory, false);
    const merge = await MergeLog.open(tsKernels, directory, false);
    const retention = await RetentionLog.open(tsKernels, directory, false);
    expect(compaction.horizon).toBe(0);
    expect(merge.record).toBeUndefined();
    expect(retention.recorded).toBe(false);
    expect(retention.state).toEqual({ policy: {}, floor: { commit: 1, position: 1 }, pending: false });
    for (const log of [compaction, merge, retention]) log.close();
    for (const { name } of logs) expect(fs.existsSync(stateFile(directory, name))).toBe(false);
  });

  for (const { name, kind, open } of logs) {
    it(`report a ${kind} record of an unknown version as CORRUPT, opened for writes or read-only`, async () => {
      const directory = temporaryDirectory();
      // A sound frame (its CRC and sequence right) whose record is of version 2.
      await writeRaw(directory, name, [2, 0, 0, 0, 0, 0, 0, 0]);
      for (const readOnly of [false, true]) {
        const error = await openError(() => open(tsKernels, directory, readOnly));
        expect(isStreamStackError(error) && error.code).toBe('CORRUPT');
        expect((error as Error).message).toBe(
          `${stateFile(directory, name)} holds a ${kind} record of an unknown form`,
        );
      }
    });
  }
});
