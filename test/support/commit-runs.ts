/** Inputs for laying commit runs directly with `buildCommitRun`, shared by the tests that do. */
import type { CommitRunInput } from '../../packages/engine/src/storage/commit-run.js';

/** The first commit of a feed, a one-shot of `records`; records without a timestamp get `timestampDefault`. */
export function oneShotRunInput(records: CommitRunInput['records'], timestampDefault: number): CommitRunInput {
  return {
    commit: 1,
    stream: 's',
    parent: 0,
    firstPosition: 1,
    openedAt: 1,
    sealedAt: 1,
    epoch: 1,
    oneShot: true,
    records,
    timestampDefault,
  };
}
