//! Manifest decoding: a commit run's manifest entries (docs/formats.md, "Manifest") decoded into
//! one batch of fixed-width columns per call. The TypeScript twin is
//! `packages/engine/src/kernels/ts/manifests.ts`, and `manifest-columns.ts` beside it holds the
//! contract both keep: the column layout in one buffer, the cursor that carries a decode from one
//! call to the next, and when a call stops early. Both check the same things in the same order
//! and fail with the same messages, so a differential test can compare them byte for byte.

use std::collections::HashMap;

use crate::error::{KernelError, KernelResult, SAFE_INTEGER_MAX};

/// The record flags a manifest entry starts with.
const HAS_FINGERPRINT: u8 = 1;
const HAS_KEY: u8 = 2;
const HAS_VERSION: u8 = 4;
const HAS_TYPE: u8 = 16;
const HAS_TAGS: u8 = 32;

/// The cursor's slots (`manifestCursor` in the contract).
const FRAME: usize = 0;
const AT: usize = 1;
const END: usize = 2;
const LEFT: usize = 3;
const RUN_ROW: usize = 4;
const ROW: usize = 5;
const TAGS: usize = 6;
const TYPES: usize = 7;
const EXTERNALS: usize = 8;
const FRAME_OFFSET: usize = 9;
const STOP: usize = 10;
const TAGS_NEEDED: usize = 11;
const RUN: usize = 12;
/// Slots a cursor has.
pub const CURSOR_SLOTS: usize = 13;

/// Numbers `runs` holds per run: its first frame (an index into `frames`), its entries, and where
/// it starts and ends in `bytes` (`manifestRunFields` in the contract).
pub const RUN_FIELDS: usize = 4;

/// Why a call returned (`manifestStop`).
const STOP_DONE: u32 = 0;
const STOP_TAGS_FULL: u32 = 1;
const STOP_TYPES_FULL: u32 = 2;

/// Numbers `external` holds per payload stored elsewhere: row, segment, offset, length, CRC.
pub const EXTERNAL_FIELDS: usize = 5;

/// Distinct types searched by their bytes before a map is made (as in the twin).
const TYPES_SCANNED_MAX: usize = 16;

/// One call's decode (`ManifestDecodeJob` in the contract).
pub struct Job<'a> {
    pub bytes: &'a [u8],
    pub frames: &'a [u32],
    pub runs: &'a [u32],
    pub place: &'a str,
    pub rows: usize,
    pub cursor: &'a mut [u32],
    pub columns: &'a mut [u8],
    pub tag_starts: &'a mut [u32],
    pub tag_ends: &'a mut [u32],
    pub type_ranges: &'a mut [u32],
    pub external: &'a mut [f64],
}

/// Byte offsets of each column of a batch of `rows` rows (`manifestColumnsLayout`).
pub struct Layout {
    pub int32_at: usize,
    pub tag_rows_at: usize,
    pub flags_at: usize,
    pub bytes: usize,
}

pub fn layout(rows: usize) -> Layout {
    let int32_at = 4 * 8 * rows;
    let tag_rows_at = int32_at + 8 * 4 * rows;
    let flags_at = tag_rows_at + 4 * (rows + 1);
    Layout {
        int32_at,
        tag_rows_at,
        flags_at,
        bytes: flags_at + rows,
    }
}

/// The batch's columns as typed slices of its one buffer.
struct Columns<'a> {
    seqs: &'a mut [f64],
    timestamps: &'a mut [f64],
    versions: &'a mut [f64],
    type_ids: &'a mut [u32],
    fingerprint_starts: &'a mut [u32],
    fingerprint_ends: &'a mut [u32],
    key_starts: &'a mut [u32],
    key_ends: &'a mut [u32],
    payload_starts: &'a mut [u32],
    payload_ends: &'a mut [u32],
    entry_starts: &'a mut [u32],
    tag_rows: &'a mut [u32],
    flags: &'a mut [u8],
}

fn columns_of(buffer: &mut [u8], rows: usize) -> KernelResult<Columns<'_>> {
    let layout = layout(rows);
    if buffer.len() < layout.bytes {
        return Err(KernelError::invalid_argument(format!(
            "the columns of {rows} rows need {} bytes, not {}",
            layout.bytes,
            buffer.len()
        )));
    }
    let (wide, rest) = buffer.split_at_mut(layout.int32_at);
    let (narrow, rest) = rest.split_at_mut(layout.flags_at - layout.int32_at);
    // SAFETY: every bit pattern is a valid f64 and u32; `align_to_mut` hands back only aligned
    // whole elements, and the prefix check below refuses a buffer that is not aligned.
    let (prefix, wide, _) = unsafe { wide.align_to_mut::<f64>() };
    let (narrow_prefix, narrow, _) = unsafe { narrow.align_to_mut::<u32>() };
    if !prefix.is_empty() || !narrow_prefix.is_empty() || wide.len() != 4 * rows {
        return Err(KernelError::invalid_argument(
            "the columns buffer is not 8-byte aligned",
        ));
    }
    let (seqs, wide) = wide.split_at_mut(rows);
    let (timestamps, wide) = wide.split_at_mut(rows);
    let (versions, _positions) = wide.split_at_mut(rows);
    let (type_ids, narrow) = narrow.split_at_mut(rows);
    let (fingerprint_starts, narrow) = narrow.split_at_mut(rows);
    let (fingerprint_ends, narrow) = narrow.split_at_mut(rows);
    let (key_starts, narrow) = narrow.split_at_mut(rows);
    let (key_ends, narrow) = narrow.split_at_mut(rows);
    let (payload_starts, narrow) = narrow.split_at_mut(rows);
    let (payload_ends, narrow) = narrow.split_at_mut(rows);
    let (entry_starts, tag_rows) = narrow.split_at_mut(rows);
    Ok(Columns {
        seqs,
        timestamps,
        versions,
        type_ids,
        fingerprint_starts,
        fingerprint_ends,
        key_starts,
        key_ends,
        payload_starts,
        payload_ends,
        entry_starts,
        tag_rows: &mut tag_rows[..rows + 1],
        flags: &mut rest[..rows],
    })
}

/// A decode failure before it is given its place: where, and why.
struct Fail {
    at: u64,
    reason: String,
}

fn fail(at: usize, reason: impl Into<String>) -> Fail {
    Fail {
        at: at as u64,
        reason: reason.into(),
    }
}

/// A cursor over one frame's entries.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    end: usize,
}

impl Reader<'_> {
    /// A varint of at most 8 bytes and at most 2^53 - 1, as the twin reads one.
    #[inline(always)]
    fn varint(&mut self) -> Result<u64, Fail> {
        if self.at < self.end {
            let byte = self.bytes[self.at];
            if byte < 0x80 {
                self.at += 1;
                return Ok(byte as u64);
            }
        }
        if self.at + 8 <= self.end {
            // Eight bytes at once: the varint ends at the first byte without its top bit, and
            // its 7-bit groups are gathered without a branch per byte. Anything unusual (no end
            // within eight bytes, a value past 2^53) takes the byte loop, which says what is wrong.
            let word = u64::from_le_bytes(self.bytes[self.at..self.at + 8].try_into().unwrap());
            let stops = !word & 0x8080_8080_8080_8080;
            if stops != 0 {
                let length = (stops.trailing_zeros() / 8 + 1) as usize;
                let kept = if length == 8 {
                    word
                } else {
                    word & ((1u64 << (8 * length)) - 1)
                };
                let mut value = 0;
                for group in 0..8 {
                    value |= ((kept >> (8 * group)) & 0x7f) << (7 * group);
                }
                if value <= SAFE_INTEGER_MAX {
                    self.at += length;
                    return Ok(value);
                }
            }
        }
        self.varint_long()
    }

    fn varint_long(&mut self) -> Result<u64, Fail> {
        let mut value: u64 = 0;
        for index in 0..8 {
            if self.at >= self.end {
                return Err(fail(self.at, "needs 1 more byte"));
            }
            let byte = self.bytes[self.at];
            self.at += 1;
            value |= ((byte & 0x7f) as u64) << (7 * index);
            if byte & 0x80 == 0 {
                if value > SAFE_INTEGER_MAX {
                    return Err(fail(self.at, "a varint exceeds 2^53"));
                }
                return Ok(value);
            }
        }
        Err(fail(self.at, "a varint is too long"))
    }

    /// A length-prefixed byte string's range.
    #[inline(always)]
    fn range(&mut self) -> Result<(usize, usize), Fail> {
        let length = self.varint()?;
        if self.at as u64 + length > self.end as u64 {
            return Err(fail(self.at, format!("needs {length} more bytes")));
        }
        let start = self.at;
        self.at += length as usize;
        Ok((start, self.at))
    }

    fn u32_at(&self, at: usize) -> Result<u32, Fail> {
        if at + 4 > self.end {
            return Err(fail(at, "needs 4 more bytes"));
        }
        let bytes = &self.bytes[at..at + 4];
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}

/// The run's distinct types, by their bytes, as the job's table holds them.
struct TypeTable<'a> {
    bytes: &'a [u8],
    map: Option<HashMap<&'a [u8], u32>>,
    /// The last id (plus one) seen for a hash of a type's bytes: most records find theirs here,
    /// checked against the table, without a search.
    hints: [u32; 256],
}

/// Whether two short byte strings are equal: a loop, where `==` calls `memcmp`, which costs more
/// than comparing the few bytes of a type name.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A JS number from a decoded varint (at most 2^53 - 1, so exact): through `i64`, whose
/// conversion is one instruction where `u64`'s takes several.
#[inline(always)]
fn number(value: u64) -> f64 {
    value as i64 as f64
}

/// A cheap hash of a type's bytes, for `TypeTable::hints`.
#[inline(always)]
fn type_hint(name: &[u8]) -> usize {
    match name {
        [] => 0,
        [first, .., last] => (name.len() * 31 + *first as usize * 7 + *last as usize) & 255,
        [only] => (31 + *only as usize * 8) & 255,
    }
}

impl<'a> TypeTable<'a> {
    /// The id of the type `bytes[start..end]`, adding it when new: `Ok(None)` when it is new and
    /// the table is full. Its UTF-8 is checked when it is new.
    fn id_of(
        &mut self,
        ranges: &mut [u32],
        cursor: &mut [u32],
        start: usize,
        end: usize,
    ) -> Result<Option<u32>, Fail> {
        let name = &self.bytes[start..end];
        let types = cursor[TYPES] as usize;
        let hint = type_hint(name);
        let hinted = self.hints[hint] as usize;
        if hinted > 0 && hinted <= types {
            let range = ranges[2 * hinted - 2] as usize..ranges[2 * hinted - 1] as usize;
            if same_bytes(&self.bytes[range], name) {
                return Ok(Some(hinted as u32 - 1));
            }
        }
        let found = if types <= TYPES_SCANNED_MAX {
            (0..types).find(|&type_id| {
                same_bytes(
                    &self.bytes[ranges[2 * type_id] as usize..ranges[2 * type_id + 1] as usize],
                    name,
                )
            })
        } else {
            let bytes = self.bytes;
            let map = self.map.get_or_insert_with(HashMap::new);
            for type_id in map.len()..types {
                let range = ranges[2 * type_id] as usize..ranges[2 * type_id + 1] as usize;
                map.insert(&bytes[range], type_id as u32);
            }
            map.get(name).map(|&id| id as usize)
        };
        if let Some(id) = found {
            self.hints[hint] = id as u32 + 1;
            return Ok(Some(id as u32));
        }
        if std::str::from_utf8(name).is_err() {
            return Err(fail(start, "a type is not valid UTF-8"));
        }
        if 2 * types + 2 > ranges.len() {
            return Ok(None);
        }
        ranges[2 * types] = start as u32;
        ranges[2 * types + 1] = end as u32;
        cursor[TYPES] = types as u32 + 1;
        self.hints[hint] = types as u32 + 1;
        Ok(Some(types as u32))
    }
}

fn check_job(job: &Job) -> KernelResult<()> {
    if job.cursor.len() < CURSOR_SLOTS {
        return Err(KernelError::invalid_argument(format!(
            "a cursor has {CURSOR_SLOTS} slots, not {}",
            job.cursor.len()
        )));
    }
    if !job.frames.len().is_multiple_of(3) || !job.type_ranges.len().is_multiple_of(2) {
        return Err(KernelError::invalid_argument(
            "frames come in threes and type ranges in pairs",
        ));
    }
    if job.runs.is_empty() || !job.runs.len().is_multiple_of(RUN_FIELDS) {
        return Err(KernelError::invalid_argument(
            "runs come in fours, at least one",
        ));
    }
    let run_count = job.runs.len() / RUN_FIELDS;
    let frame_count = job.frames.len() / 3;
    for index in 0..run_count {
        let run = run_at(job.runs, frame_count, index);
        if run.first_frame > run.end_frame || run.end_frame > frame_count {
            return Err(KernelError::invalid_argument(
                "a run's frames are not in order",
            ));
        }
        if run.start > run.end || run.end > job.bytes.len() {
            return Err(KernelError::invalid_argument(
                "a run lies outside the bytes",
            ));
        }
        for frame in job.frames[3 * run.first_frame..3 * run.end_frame].chunks_exact(3) {
            if (frame[1] as usize) < run.start || frame[2] as usize > run.end {
                return Err(KernelError::invalid_argument(
                    "a frame's data lies outside its run",
                ));
            }
        }
    }
    let current = job.cursor[RUN] as usize;
    if current > run_count
        || (current < run_count && {
            let run = run_at(job.runs, frame_count, current);
            (job.cursor[FRAME] as usize) < run.first_frame
                || job.cursor[FRAME] as usize > run.end_frame
        })
    {
        return Err(KernelError::invalid_argument(
            "the cursor's frame is not one of its run's",
        ));
    }
    if job.tag_starts.len() != job.tag_ends.len() {
        return Err(KernelError::invalid_argument(
            "tag starts and ends have the same capacity",
        ));
    }
    if job.external.len() < EXTERNAL_FIELDS * job.rows {
        return Err(KernelError::invalid_argument(
            "external has room for a payload per row",
        ));
    }
    if job.cursor[ROW] as usize > job.rows
        || job.cursor[TAGS] as usize > job.tag_starts.len()
        || 2 * job.cursor[TYPES] as usize > job.type_ranges.len()
        || job.cursor[EXTERNALS] as usize > job.rows
    {
        return Err(KernelError::invalid_argument(
            "the cursor points past the job's room",
        ));
    }
    for frame in job.frames.chunks_exact(3) {
        if frame[1] > frame[2] || frame[2] as usize > job.bytes.len() {
            return Err(KernelError::invalid_argument(
                "a frame's data lies outside the run",
            ));
        }
    }
    Ok(())
}

/// Decodes the job's batch from its cursor on (see the module doc and the contract).
pub fn decode(job: Job) -> KernelResult<()> {
    check_job(&job)?;
    let mut columns = columns_of(job.columns, job.rows)?;
    let Job {
        bytes,
        frames,
        runs,
        place,
        rows,
        cursor,
        tag_starts,
        tag_ends,
        type_ranges,
        external,
        ..
    } = job;
    let mut types = TypeTable {
        bytes,
        map: None,
        hints: [0; 256],
    };
    let result = decode_rows(
        bytes,
        frames,
        runs,
        rows,
        cursor,
        &mut columns,
        tag_starts,
        tag_ends,
        type_ranges,
        external,
        &mut types,
    );
    match result {
        Ok(()) => Ok(()),
        Err(Failure::Entry(failure)) => Err(KernelError::corrupt(format!(
            "manifest at {place}+{} is corrupt at byte {}: {}",
            cursor[FRAME_OFFSET], failure.at, failure.reason
        ))),
        Err(Failure::Short { run, count, held }) => {
            Err(KernelError::corrupt(if runs.len() > RUN_FIELDS {
                format!("{place}: run {run}: the commit names {count} records but its manifests hold {held}")
            } else {
                format!("{place}: the commit names {count} records but its manifests hold {held}")
            }))
        }
        Err(Failure::Rows(held)) => Err(KernelError::invalid_argument(format!(
            "the batch has {rows} rows but its runs hold {held}"
        ))),
    }
}

/// One run of a job (`RUN_FIELDS` numbers of `runs`): its frames are `first_frame..end_frame`.
struct Run {
    first_frame: usize,
    end_frame: usize,
    count: u64,
    start: usize,
    end: usize,
}

fn run_at(runs: &[u32], frame_count: usize, index: usize) -> Run {
    let fields = &runs[RUN_FIELDS * index..RUN_FIELDS * (index + 1)];
    let end_frame = runs
        .get(RUN_FIELDS * (index + 1))
        .map_or(frame_count, |&first| first as usize);
    Run {
        first_frame: fields[0] as usize,
        end_frame,
        count: fields[1] as u64,
        start: fields[2] as usize,
        end: fields[3] as usize,
    }
}

/// How a decode failed: an entry or frame that does not decode, manifests that end before the
/// commit's records do (which run, the records it names and those its manifests held), or a
/// batch with more rows than its runs hold (the rows they held).
enum Failure {
    Entry(Fail),
    Short { run: usize, count: u64, held: u64 },
    Rows(usize),
}

impl From<Fail> for Failure {
    fn from(fail: Fail) -> Self {
        Failure::Entry(fail)
    }
}

/// Opens the next manifest frame of the current run that has entries (`nextManifest` in the
/// twin), moving on to the next run once this one's records are all decoded.
fn next_manifest(
    bytes: &[u8],
    frames: &[u32],
    runs: &[u32],
    cursor: &mut [u32],
) -> Result<Run, Failure> {
    let frame_count = frames.len() / 3;
    let run_count = runs.len() / RUN_FIELDS;
    let mut index = cursor[RUN] as usize;
    while index < run_count && cursor[RUN_ROW] as u64 == run_at(runs, frame_count, index).count {
        index += 1;
        cursor[RUN] = index as u32;
        cursor[RUN_ROW] = 0;
        if index < run_count {
            cursor[FRAME] = run_at(runs, frame_count, index).first_frame as u32;
        }
    }
    if index == run_count {
        return Err(Failure::Rows(cursor[ROW] as usize));
    }
    let run = run_at(runs, frame_count, index);
    let count = run.count;
    let run_row = cursor[RUN_ROW] as u64;
    let mut frame = cursor[FRAME] as usize;
    while frame < run.end_frame {
        let offset = frames[3 * frame];
        let data_start = frames[3 * frame + 1] as usize;
        let end = frames[3 * frame + 2] as usize;
        frame += 1;
        cursor[FRAME] = frame as u32;
        cursor[FRAME_OFFSET] = offset;
        let reader = Reader {
            bytes,
            at: data_start,
            end,
        };
        reader.u32_at(data_start + 1)?;
        let entries = reader.u32_at(data_start + 5)?;
        let at = data_start + 9;
        if run_row + entries as u64 > count {
            break;
        }
        if entries == 0 {
            if at != end {
                return Err(fail(at, format!("{} trailing bytes", end as i64 - at as i64)).into());
            }
            continue;
        }
        cursor[AT] = at as u32;
        cursor[END] = end as u32;
        cursor[LEFT] = entries;
        return Ok(run);
    }
    Err(Failure::Short {
        run: index,
        count,
        held: run_row,
    })
}

/// The per-entry loop (`decodeManifests` in the twin).
#[allow(clippy::too_many_arguments)]
fn decode_rows<'a>(
    bytes: &'a [u8],
    frames: &[u32],
    runs: &[u32],
    rows: usize,
    cursor: &mut [u32],
    columns: &mut Columns,
    tag_starts: &mut [u32],
    tag_ends: &mut [u32],
    type_ranges: &mut [u32],
    external: &mut [f64],
    types: &mut TypeTable<'a>,
) -> Result<(), Failure> {
    let mut row = cursor[ROW] as usize;
    let mut tags = cursor[TAGS] as usize;
    let mut externals = cursor[EXTERNALS] as usize;
    cursor[STOP] = STOP_DONE;
    // Where the current run lies: its payloads' offsets count from its start.
    let frame_count = frames.len() / 3;
    let mut run = run_at(
        runs,
        frame_count,
        (cursor[RUN] as usize).min(runs.len() / RUN_FIELDS - 1),
    );
    while row < rows {
        if cursor[LEFT] == 0 {
            cursor[ROW] = row as u32;
            run = next_manifest(bytes, frames, runs, cursor)?;
        }
        let row_before = row;
        let mut reader = Reader {
            bytes,
            at: cursor[AT] as usize,
            end: cursor[END] as usize,
        };
        let mut left = cursor[LEFT];
        while row < rows && left > 0 {
            let entry_start = reader.at;
            if reader.at >= reader.end {
                return Err(fail(reader.at, "needs 1 more byte").into());
            }
            columns.entry_starts[row] = reader.at as u32;
            let flags = bytes[reader.at];
            reader.at += 1;
            if flags & HAS_FINGERPRINT == 0 {
                return Err(fail(reader.at, "a manifest entry lacks its fingerprint").into());
            }
            columns.flags[row] = flags;
            columns.seqs[row] = number(reader.varint()?);
            columns.timestamps[row] = number(reader.varint()?);
            let (fingerprint_start, fingerprint_end) = reader.range()?;
            columns.fingerprint_starts[row] = fingerprint_start as u32;
            columns.fingerprint_ends[row] = fingerprint_end as u32;
            let (key_start, key_end) = if flags & HAS_KEY != 0 {
                reader.range()?
            } else {
                (reader.at, reader.at)
            };
            columns.key_starts[row] = key_start as u32;
            columns.key_ends[row] = key_end as u32;
            columns.versions[row] = if flags & HAS_VERSION != 0 {
                number(reader.varint()?)
            } else {
                0.0
            };
            columns.type_ids[row] = u32::MAX;
            if flags & HAS_TYPE != 0 {
                let (start, end) = reader.range()?;
                match types.id_of(type_ranges, cursor, start, end)? {
                    Some(id) => columns.type_ids[row] = id,
                    None => {
                        cursor[STOP] = STOP_TYPES_FULL;
                        reader.at = entry_start;
                        break;
                    }
                }
            }
            columns.tag_rows[row] = tags as u32;
            if flags & HAS_TAGS != 0 {
                let tag_count = reader.varint()?;
                if tag_count > (reader.end - reader.at) as u64 {
                    return Err(fail(
                        reader.at,
                        format!("tag count {tag_count} exceeds the frame"),
                    )
                    .into());
                }
                let tag_count = tag_count as usize;
                if tags + tag_count > tag_starts.len() {
                    cursor[STOP] = STOP_TAGS_FULL;
                    cursor[TAGS_NEEDED] = (tags + tag_count) as u32;
                    reader.at = entry_start;
                    break;
                }
                for _ in 0..tag_count {
                    let (start, end) = reader.range()?;
                    tag_starts[tags] = start as u32;
                    tag_ends[tags] = end as u32;
                    tags += 1;
                }
            }
            // The payload's location, then the entry's own CRC: a run read whole is covered by
            // its frames' CRCs.
            let segment = reader.varint()?;
            let offset = reader.varint()?;
            let length = reader.varint()?;
            let crc = reader.u32_at(reader.at)?;
            reader.u32_at(reader.at + 4)?;
            reader.at += 8;
            if segment == 0 {
                if offset + length > (run.end - run.start) as u64 {
                    return Err(fail(reader.at, "a payload lies past its run").into());
                }
                columns.payload_starts[row] = (run.start as u64 + offset) as u32;
                columns.payload_ends[row] = (run.start as u64 + offset + length) as u32;
            } else {
                let field = EXTERNAL_FIELDS * externals;
                external[field] = row as f64;
                external[field + 1] = number(segment);
                external[field + 2] = number(offset);
                external[field + 3] = number(length);
                external[field + 4] = crc as f64;
                externals += 1;
                columns.payload_starts[row] = 0;
                columns.payload_ends[row] = 0;
            }
            row += 1;
            left -= 1;
        }
        cursor[AT] = reader.at as u32;
        cursor[LEFT] = left;
        cursor[RUN_ROW] += (row - row_before) as u32;
        cursor[ROW] = row as u32;
        cursor[TAGS] = tags as u32;
        cursor[EXTERNALS] = externals as u32;
        if cursor[STOP] != STOP_DONE {
            return Ok(());
        }
        if left == 0 && reader.at != reader.end {
            return Err(fail(
                reader.at,
                format!("{} trailing bytes", reader.end - reader.at),
            )
            .into());
        }
    }
    columns.tag_rows[rows] = tags as u32;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn put_varint(out: &mut Vec<u8>, mut value: u64) {
        while value >= 0x80 {
            out.push(value as u8 | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }

    fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
        put_varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }

    /// One manifest entry: a key, a version, a type and two tags when `full`, its payload in the
    /// run (segment 0) or stored elsewhere.
    fn entry(out: &mut Vec<u8>, seq: u64, full: bool, elsewhere: bool) {
        let flags = if full {
            HAS_FINGERPRINT | HAS_KEY | HAS_VERSION | HAS_TYPE | HAS_TAGS
        } else {
            HAS_FINGERPRINT
        };
        out.push(flags);
        put_varint(out, seq);
        put_varint(out, 1_764_979_200_000 + seq);
        put_bytes(out, &seq.to_le_bytes());
        if full {
            put_bytes(out, format!("key-{seq}").as_bytes());
            put_varint(out, seq << 30);
            put_bytes(
                out,
                if seq.is_multiple_of(2) {
                    b"even"
                } else {
                    b"odd"
                },
            );
            put_varint(out, 2);
            put_bytes(out, b"a");
            put_bytes(out, "tag-é".as_bytes());
        }
        put_varint(out, if elsewhere { 1 << 40 } else { 0 });
        put_varint(out, 4);
        put_varint(out, 3);
        out.extend_from_slice(&[0xAA; 4]);
        out.extend_from_slice(&[0; 4]);
    }

    /// A run of one manifest frame (no frame header: the decoder is given the data range).
    fn run(entries: u64, full: bool) -> (Vec<u8>, [u32; 3]) {
        let mut bytes = vec![0u8; 16];
        let data_start = bytes.len();
        bytes.push(3);
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&(entries as u32).to_le_bytes());
        for seq in 1..=entries {
            entry(&mut bytes, seq, full, seq.is_multiple_of(3));
        }
        let end = bytes.len() as u32;
        (bytes, [0, data_start as u32, end])
    }

    struct Room {
        cursor: [u32; CURSOR_SLOTS],
        columns: Vec<f64>,
        tag_starts: Vec<u32>,
        tag_ends: Vec<u32>,
        type_ranges: Vec<u32>,
        external: Vec<f64>,
    }

    impl Room {
        fn new(rows: usize, tags: usize, types: usize) -> Room {
            Room {
                cursor: [0; CURSOR_SLOTS],
                columns: vec![0.0; layout(rows).bytes.div_ceil(8)],
                tag_starts: vec![0; tags],
                tag_ends: vec![0; tags],
                type_ranges: vec![0; 2 * types],
                external: vec![0.0; EXTERNAL_FIELDS * rows],
            }
        }

        fn decode(
            &mut self,
            bytes: &[u8],
            frames: &[u32],
            count: u64,
            rows: usize,
        ) -> KernelResult<()> {
            let runs = [0, count as u32, 0, bytes.len() as u32];
            self.decode_runs(bytes, frames, &runs, rows)
        }

        /// A decode of several runs laid side by side in `bytes` (`RUN_FIELDS` numbers a run).
        fn decode_runs(
            &mut self,
            bytes: &[u8],
            frames: &[u32],
            runs: &[u32],
            rows: usize,
        ) -> KernelResult<()> {
            // SAFETY: a Vec<f64>'s bytes, viewed as bytes for the one buffer the contract takes.
            let columns = unsafe {
                std::slice::from_raw_parts_mut(
                    self.columns.as_mut_ptr() as *mut u8,
                    self.columns.len() * 8,
                )
            };
            decode(Job {
                bytes,
                frames,
                runs,
                place: "run",
                rows,
                cursor: &mut self.cursor,
                columns,
                tag_starts: &mut self.tag_starts,
                tag_ends: &mut self.tag_ends,
                type_ranges: &mut self.type_ranges,
                external: &mut self.external,
            })
        }

        fn f64_column(&self, rows: usize, index: usize) -> &[f64] {
            &self.columns[index * rows..(index + 1) * rows]
        }
    }

    #[test]
    fn decodes_every_field_into_its_column() {
        let (bytes, frames) = run(6, true);
        let mut room = Room::new(6, 12, 4);
        room.decode(&bytes, &frames, 6, 6).unwrap();
        assert_eq!(room.cursor[STOP], STOP_DONE);
        assert_eq!(room.cursor[ROW], 6);
        assert_eq!(room.f64_column(6, 0), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(room.f64_column(6, 1)[5], 1_764_979_200_006.0);
        assert_eq!(room.f64_column(6, 2)[2], (3u64 << 30) as f64);
        // Two types, in order of first appearance; twelve tags; seqs 3 and 6 stored elsewhere.
        assert_eq!(room.cursor[TYPES], 2);
        let name = |id: usize| {
            &bytes[room.type_ranges[2 * id] as usize..room.type_ranges[2 * id + 1] as usize]
        };
        assert_eq!((name(0), name(1)), (&b"odd"[..], &b"even"[..]));
        assert_eq!(room.cursor[TAGS], 12);
        assert_eq!(
            &bytes[room.tag_starts[1] as usize..room.tag_ends[1] as usize],
            "tag-é".as_bytes()
        );
        assert_eq!(room.cursor[EXTERNALS], 2);
        assert_eq!(
            &room.external[..5],
            &[2.0, (1u64 << 40) as f64, 4.0, 3.0, 0xAAAA_AAAAu32 as f64]
        );
    }

    #[test]
    fn stops_for_room_and_goes_on_from_the_cursor() {
        let (bytes, frames) = run(4, true);
        let mut room = Room::new(4, 0, 1);
        room.decode(&bytes, &frames, 4, 4).unwrap();
        assert_eq!(
            (
                room.cursor[STOP],
                room.cursor[ROW],
                room.cursor[TAGS_NEEDED]
            ),
            (STOP_TAGS_FULL, 0, 2)
        );
        room.tag_starts = vec![0; 8];
        room.tag_ends = vec![0; 8];
        room.decode(&bytes, &frames, 4, 4).unwrap();
        assert_eq!((room.cursor[STOP], room.cursor[ROW]), (STOP_TYPES_FULL, 1));
        room.type_ranges.resize(4, 0);
        room.decode(&bytes, &frames, 4, 4).unwrap();
        assert_eq!(
            (room.cursor[STOP], room.cursor[ROW], room.cursor[TAGS]),
            (STOP_DONE, 4, 8)
        );
    }

    /// Two runs side by side, as a stretch of a segment holds them: the second's frame and
    /// payload offsets are its own, from where it starts.
    fn two_runs() -> (Vec<u8>, Vec<u32>, Vec<u32>) {
        let (mut bytes, first) = run(2, true);
        let (second_bytes, second) = run(3, true);
        let start = bytes.len() as u32;
        bytes.extend_from_slice(&second_bytes);
        let frames = vec![
            first[0],
            first[1],
            first[2],
            start + second[0],
            start + second[1],
            start + second[2],
        ];
        let runs = vec![0, 2, 0, start, 1, 3, start, bytes.len() as u32];
        (bytes, frames, runs)
    }

    #[test]
    fn decodes_runs_side_by_side_into_one_batch() {
        let (mut bytes, frames, runs) = two_runs();
        // Payloads of the run: make the second run's first one (seq 1, offset 4) readable.
        let mut room = Room::new(5, 10, 4);
        room.decode_runs(&bytes, &frames, &runs, 5).unwrap();
        assert_eq!((room.cursor[STOP], room.cursor[ROW]), (STOP_DONE, 5));
        assert_eq!((room.cursor[RUN], room.cursor[RUN_ROW]), (1, 3));
        assert_eq!(room.f64_column(5, 0), &[1.0, 2.0, 1.0, 2.0, 3.0]);
        // The types are the batch's: "odd" and "even" once each, from whichever run met them first.
        assert_eq!(room.cursor[TYPES], 2);
        // Same-run payloads count from their own run's start.
        let layout = layout(5);
        let narrow = |column: usize, row: usize| {
            let at = layout.int32_at + 4 * (column * 5 + row);
            let bytes: &[u8] = unsafe {
                std::slice::from_raw_parts(
                    room.columns.as_ptr() as *const u8,
                    room.columns.len() * 8,
                )
            };
            u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
        };
        assert_eq!((narrow(5, 0), narrow(6, 0)), (4, 7));
        assert_eq!((narrow(5, 2), narrow(6, 2)), (runs[6] + 4, runs[6] + 7));
        // A batch with a row more than the runs hold is the caller's mistake.
        let mut room = Room::new(6, 12, 4);
        let error = room.decode_runs(&bytes, &frames, &runs, 6).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        assert_eq!(error.message, "the batch has 6 rows but its runs hold 5");
        // A run whose manifests hold fewer records than it names is named in the error.
        let mut short = runs.clone();
        short[5] = 4;
        let mut room = Room::new(6, 12, 4);
        let error = room.decode_runs(&bytes, &frames, &short, 6).unwrap_err();
        assert_eq!(
            error.message,
            "run: run 1: the commit names 4 records but its manifests hold 3"
        );
        // A frame outside its run is refused before anything is decoded.
        bytes.push(0);
        let mut outside = runs.clone();
        outside[3] = 10;
        let mut room = Room::new(5, 10, 4);
        let error = room.decode_runs(&bytes, &frames, &outside, 5).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
    }

    fn reader(bytes: &[u8], end: usize) -> Reader<'_> {
        Reader { bytes, at: 0, end }
    }

    #[test]
    fn reads_varints_of_every_width_alike_on_both_paths() {
        for shift in 0..53 {
            for value in [
                (1u64 << shift) - 1,
                1u64 << shift,
                SAFE_INTEGER_MAX >> (52 - shift.min(52)),
            ] {
                let mut bytes = Vec::new();
                put_varint(&mut bytes, value);
                let short = bytes.len();
                // With eight or more bytes after it, the word path reads it; without, the byte loop.
                bytes.extend_from_slice(&[0xFF; 8]);
                let mut fast = reader(&bytes, bytes.len());
                let mut slow = reader(&bytes, short);
                assert_eq!(fast.varint().ok(), Some(value));
                assert_eq!(slow.varint().ok(), Some(value));
                assert_eq!((fast.at, slow.at), (short, short));
            }
        }
        // Past 2^53, or longer than eight bytes: refused the same way on both paths.
        for bytes in [
            vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0],
            vec![0xFF; 10],
        ] {
            let mut fast = reader(&bytes, bytes.len());
            let mut slow = reader(&bytes, bytes.len());
            let (fast, slow) = (
                fast.varint().err().unwrap(),
                slow.varint_long().err().unwrap(),
            );
            assert_eq!(
                (fast.at, fast.reason.as_str()),
                (slow.at, slow.reason.as_str())
            );
        }
    }

    #[test]
    fn names_the_place_of_damage() {
        let (mut bytes, frames) = run(2, false);
        let last = bytes.len() - 9;
        bytes[last] = 0xFF; // The second entry's payload length now runs on past the frame.
        let mut room = Room::new(2, 0, 0);
        let error = room.decode(&bytes, &frames, 2, 2).unwrap_err();
        assert_eq!(error.code, ErrorCode::Corrupt);
        assert!(
            error
                .message
                .starts_with("manifest at run+0 is corrupt at byte"),
            "{}",
            error.message
        );
        let mut room = Room::new(3, 0, 0);
        let error = room.decode(&run(2, false).0, &frames, 3, 3).unwrap_err();
        assert_eq!(
            error.message,
            "run: the commit names 3 records but its manifests hold 2"
        );
    }
}
