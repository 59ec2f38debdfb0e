/**
 * The first data byte of every frame names its kind. Control records (bit 31 of the length set)
 * are the ones that describe or close a run; data records carry what users wrote. Format.
 */
export const enum FrameKind {
  /** WAL, control: a stream was opened (stream id, epoch, open time, message). */
  StreamOpen = 0x01,
  /** WAL, control: a stream was aborted (stream id, epoch, time). */
  StreamAbort = 0x02,
  /** WAL, control: the records that follow form one batch (stream id, first seq, count, epoch). */
  BatchHeader = 0x03,
  /** WAL, data: one record of the batch before it. */
  Record = 0x04,
  /** WAL, control: ends a group commit (its WAL sequence and frame count): the commit marker. */
  WalMarker = 0x0f,
  /** History, data: payload bytes, with a small directory of their CRC-32C and lengths. */
  Pack = 0x11,
  /** History, data: ordered record metadata of one commit, with payload locations. */
  Manifest = 0x12,
  /**
   * History, data: fingerprints a key-compacted run dropped the records of, with their seqs
   * (the first occurrences among them), so whole-history dedup stays what it was.
   */
  Retired = 0x14,
  /** History, control: the commit record, last in its run: the run's commit marker. */
  Commit = 0x13,
  /**
   * Both logs, control: the first frame of every group write — the group's byte length after
   * this frame and its own offset in the segment — so recovery can tell where the last write
   * began, and so damage before it is told apart from a torn tail (docs/faults.md).
   */
  GroupHeader = 0x30,
  /** Both logs, control: the segment is finished; the log goes on in the segment it names. */
  SegmentEnd = 0x31,
  /** WAL, control: the WAL segments live from here on (finished ones are deleted on purpose). */
  LiveSegments = 0x32,
}
