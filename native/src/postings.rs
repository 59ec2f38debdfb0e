//! Posting lists: strictly ascending u32 positions, their byte format (docs/formats.md, "Posting
//! lists"), and the intersection and union of two lists.

use crate::error::{ErrorCode, KernelError, KernelResult};

/// Lists with at least this many entries use the block form. Format; equals
/// `postingsBlockThreshold` in limits.ts.
pub const POSTINGS_BLOCK_THRESHOLD_ENTRIES: usize = 128;

/// Entries per block of the block form; the last block may be shorter. Format; equals
/// `postingsBlockLength` in limits.ts.
pub const POSTINGS_BLOCK_LENGTH_ENTRIES: usize = 128;

/// When the longer list has at least this many times the entries of the shorter one, the
/// intersection gallops through it instead of merging. Equals `intersectGallopRatio` in limits.ts.
pub const INTERSECT_GALLOP_RATIO: usize = 24;

/// The form byte of a plain delta-varint list.
const FORM_PLAIN: u8 = 0x00;

/// The form byte of a block list with a skip directory.
const FORM_BLOCK: u8 = 0x01;

/// Slots the intersection output has beyond the shorter list's length: the merges store a whole
/// register (four entries) or one scalar slot past the last match before they know whether it
/// is one.
const INTERSECT_OUTPUT_SLACK_ENTRIES: usize = 4;

/// A varint that encodes a u32 takes at most this many bytes.
const VARINT_U32_MAX_BYTES: usize = 5;

/// Entries compared per step by the sortedness check; big enough that the compiler vectorizes the
/// comparison, small enough that an unsorted list is reported without scanning all of it.
const SORTED_CHECK_CHUNK_ENTRIES: usize = 512;

fn not_sorted(which: &str, index: usize, values: &[u32]) -> KernelError {
    KernelError::new(
        ErrorCode::PostingsNotSorted,
        format!(
            "{which} is not strictly ascending: entry {index} ({}) follows {}",
            values[index],
            values[index - 1]
        ),
    )
}

/// The index of the first entry that is not greater than the one before it, if any.
pub fn first_unsorted_index(values: &[u32]) -> Option<usize> {
    let mut start = 0;
    while start + 1 < values.len() {
        let end = (start + SORTED_CHECK_CHUNK_ENTRIES).min(values.len() - 1);
        let earlier = &values[start..end];
        let later = &values[start + 1..end + 1];
        // Accumulating without an early exit lets the compiler compare many pairs per instruction.
        let violations = earlier
            .iter()
            .zip(later)
            .fold(0u32, |found, (x, y)| found | u32::from(x >= y));
        if violations != 0 {
            return earlier
                .iter()
                .zip(later)
                .position(|(x, y)| x >= y)
                .map(|i| start + i + 1);
        }
        start = end;
    }
    None
}

fn check_sorted(values: &[u32], which: &str) -> KernelResult<()> {
    match first_unsorted_index(values) {
        Some(index) => Err(not_sorted(which, index, values)),
        None => Ok(()),
    }
}

/// Bytes of the varint of `value`: one per started group of seven bits, at least one.
fn varint_length(value: u32) -> usize {
    let significant_bits = 32 - (value | 1).leading_zeros() as usize;
    significant_bits.div_ceil(7)
}

fn push_varint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7F) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Bytes that the distances of `positions` from each other (the first from `previous`) take.
fn distances_length(positions: &[u32], mut previous: u32) -> usize {
    let mut total = 0;
    for &position in positions {
        total += varint_length(position - previous);
        previous = position;
    }
    total
}

fn push_distances(out: &mut Vec<u8>, positions: &[u32], mut previous: u32) {
    for &position in positions {
        push_varint(out, position - previous);
        previous = position;
    }
}

/// Encodes strictly ascending positions: plain form below the block threshold, block form from
/// there up. Not strictly ascending: `POSTINGS_NOT_SORTED`.
pub fn encode(positions: &[u32]) -> KernelResult<Vec<u8>> {
    check_sorted(positions, "positions")?;
    let count = u32::try_from(positions.len()).map_err(|_| {
        KernelError::invalid_argument(format!("{} positions are too many", positions.len()))
    })?;

    if positions.len() < POSTINGS_BLOCK_THRESHOLD_ENTRIES {
        let mut out = Vec::with_capacity(1 + varint_length(count) + distances_length(positions, 0));
        out.push(FORM_PLAIN);
        push_varint(&mut out, count);
        push_distances(&mut out, positions, 0);
        return Ok(out);
    }

    // The directory needs every block's body length before any body is written, so measure
    // first; that also sizes the output exactly.
    let blocks = positions.chunks(POSTINGS_BLOCK_LENGTH_ENTRIES);
    let mut body_lengths = Vec::with_capacity(blocks.len());
    let mut previous_last = 0;
    let mut directory_length = 0;
    let mut bodies_length = 0;
    for block in blocks.clone() {
        let body_length = distances_length(block, previous_last);
        // A body holds at most 128 varints of 5 bytes, so its length always fits a u32.
        let body_length = body_length as u32;
        let last = block[block.len() - 1];
        directory_length += varint_length(last - previous_last) + varint_length(body_length);
        bodies_length += body_length as usize;
        body_lengths.push(body_length);
        previous_last = last;
    }

    let mut out = Vec::with_capacity(1 + varint_length(count) + directory_length + bodies_length);
    out.push(FORM_BLOCK);
    push_varint(&mut out, count);
    previous_last = 0;
    for (block, &body_length) in blocks.clone().zip(&body_lengths) {
        let last = block[block.len() - 1];
        push_varint(&mut out, last - previous_last);
        push_varint(&mut out, body_length);
        previous_last = last;
    }
    previous_last = 0;
    for block in blocks {
        push_distances(&mut out, block, previous_last);
        previous_last = block[block.len() - 1];
    }
    Ok(out)
}

/// Reads the bytes of an encoded list front to back; every failure is `CORRUPT`.
struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    fn read_varint(&mut self, what: &str) -> KernelResult<u32> {
        let mut value: u64 = 0;
        for group in 0..VARINT_U32_MAX_BYTES {
            let Some(&byte) = self.bytes.get(self.position) else {
                return Err(KernelError::corrupt(format!(
                    "posting list ends inside the varint of {what} at byte {}",
                    self.position
                )));
            };
            self.position += 1;
            value |= u64::from(byte & 0x7F) << (7 * group);
            if byte & 0x80 == 0 {
                return u32::try_from(value).map_err(|_| {
                    KernelError::corrupt(format!("varint of {what} passes 2^32 - 1"))
                });
            }
        }
        Err(KernelError::corrupt(format!(
            "varint of {what} is longer than 5 bytes"
        )))
    }
}

/// Decodes `count` distances into `out`, continuing from `previous` (the last position so far,
/// if any). Returns the new last position.
fn decode_run(
    reader: &mut Reader<'_>,
    count: usize,
    mut previous: Option<u32>,
    out: &mut Vec<u32>,
) -> KernelResult<Option<u32>> {
    for _ in 0..count {
        let distance = reader.read_varint("a position")?;
        let position = match previous {
            // Only the very first position of the list may be stored as a distance of zero.
            None => distance,
            Some(_) if distance == 0 => {
                return Err(KernelError::corrupt(format!(
                    "positions do not ascend strictly at entry {}",
                    out.len()
                )))
            }
            Some(last) => last.checked_add(distance).ok_or_else(|| {
                KernelError::corrupt(format!("position of entry {} passes 2^32 - 1", out.len()))
            })?,
        };
        out.push(position);
        previous = Some(position);
    }
    Ok(previous)
}

/// Decodes either form of posting list. Malformed input: `CORRUPT`.
pub fn decode(encoded: &[u8]) -> KernelResult<Vec<u32>> {
    let mut reader = Reader {
        bytes: encoded,
        position: 0,
    };
    let Some(&form) = encoded.first() else {
        return Err(KernelError::corrupt("posting list is empty: no form byte"));
    };
    reader.position = 1;
    let count = reader.read_varint("the count")? as usize;
    // Every entry takes at least one byte, so a count above the bytes left is corrupt, and
    // checking it first keeps a forged count from reserving gigabytes.
    if count > reader.remaining() {
        return Err(KernelError::corrupt(format!(
            "count {count} exceeds the {} bytes that follow",
            reader.remaining()
        )));
    }
    let mut out = Vec::with_capacity(count);

    // Each length has exactly one form, so a list in the other one was not written by `encode`.
    match form {
        FORM_PLAIN if count >= POSTINGS_BLOCK_THRESHOLD_ENTRIES => {
            return Err(KernelError::corrupt(format!(
                "a list of {count} entries uses the plain form"
            )))
        }
        FORM_BLOCK if count < POSTINGS_BLOCK_THRESHOLD_ENTRIES => {
            return Err(KernelError::corrupt(format!(
                "a list of {count} entries uses the block form"
            )))
        }
        FORM_PLAIN => {
            decode_run(&mut reader, count, None, &mut out)?;
        }
        FORM_BLOCK => {
            let block_count = count.div_ceil(POSTINGS_BLOCK_LENGTH_ENTRIES);
            let mut directory = Vec::with_capacity(block_count);
            let mut directory_last: u32 = 0;
            for block in 0..block_count {
                let distance = reader.read_varint("a directory position")?;
                let body_length = reader.read_varint("a directory body length")? as usize;
                directory_last = directory_last.checked_add(distance).ok_or_else(|| {
                    KernelError::corrupt(format!(
                        "directory position of block {block} passes 2^32 - 1"
                    ))
                })?;
                directory.push((directory_last, body_length));
            }
            let mut previous = None;
            for (block, &(expected_last, body_length)) in directory.iter().enumerate() {
                let body_start = reader.position;
                let body_end = match body_start.checked_add(body_length) {
                    Some(end) if end <= encoded.len() => end,
                    _ => {
                        return Err(KernelError::corrupt(format!(
                            "body of block {block} runs past the end of the list"
                        )))
                    }
                };
                let entries = POSTINGS_BLOCK_LENGTH_ENTRIES
                    .min(count - block * POSTINGS_BLOCK_LENGTH_ENTRIES);
                let mut body = Reader {
                    bytes: &encoded[..body_end],
                    position: body_start,
                };
                previous = decode_run(&mut body, entries, previous, &mut out)?;
                if body.position != body_end {
                    return Err(KernelError::corrupt(format!(
                        "block {block} holds other than {entries} entries in its {body_length} bytes"
                    )));
                }
                if previous != Some(expected_last) {
                    return Err(KernelError::corrupt(format!(
                        "last position of block {block} disagrees with the directory"
                    )));
                }
                reader.position = body_end;
            }
        }
        unknown => {
            return Err(KernelError::corrupt(format!(
                "unknown posting list form byte {unknown}"
            )))
        }
    }

    if reader.remaining() != 0 {
        return Err(KernelError::corrupt(format!(
            "{} trailing bytes after the posting list",
            reader.remaining()
        )));
    }
    Ok(out)
}

/// The positions in both strictly ascending lists, ascending. Unsorted input:
/// `POSTINGS_NOT_SORTED`.
pub fn intersect(a: &[u32], b: &[u32]) -> KernelResult<Vec<u32>> {
    check_sorted(a, "first list")?;
    check_sorted(b, "second list")?;
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let mut out = Vec::with_capacity(short.len() + INTERSECT_OUTPUT_SLACK_ENTRIES);
    if short.is_empty() {
        return Ok(out);
    }
    if long.len() / short.len() >= INTERSECT_GALLOP_RATIO {
        intersect_galloping(short, long, &mut out);
    } else {
        intersect_merge(short, long, &mut out);
    }
    Ok(out)
}

/// The index of the first entry of `rest` that is not less than `wanted` (`rest.len()` when there
/// is none), found by exponential then binary search, so the cost grows with the log of the
/// distance rather than of the length.
fn first_not_less(rest: &[u32], wanted: u32) -> usize {
    match rest.first() {
        None => 0,
        Some(&first) if first >= wanted => 0,
        Some(_) => {
            // Invariant: rest[step / 2] < wanted.
            let mut step = 1;
            while step < rest.len() && rest[step] < wanted {
                step *= 2;
            }
            let low = step / 2 + 1;
            let high = (step + 1).min(rest.len());
            low + rest[low..high].partition_point(|&value| value < wanted)
        }
    }
}

/// For each entry of the short list, gallops through the rest of the long list:
/// O(short * log(long / short)).
fn intersect_galloping(short: &[u32], long: &[u32], out: &mut Vec<u32>) {
    let mut base = 0;
    for &wanted in short {
        if base >= long.len() {
            break;
        }
        base += first_not_less(&long[base..], wanted);
        if base < long.len() && long[base] == wanted {
            out.push(wanted);
            base += 1;
        }
    }
}

/// Merges two lists of similar length, with SIMD when the CPU has it.
fn intersect_merge(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
    out.reserve(a.len().min(b.len()) + INTERSECT_OUTPUT_SLACK_ENTRIES);
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("ssse3") {
            // SAFETY: the CPU supports SSSE3, `out` is empty and has the room required.
            unsafe { simd::intersect_merge_ssse3(a, b, out) };
            return;
        }
    }
    // SAFETY: `out` is empty and has the room required.
    unsafe { intersect_merge_scalar_from(a, b, 0, 0, out) };
}

/// Branchless merge from `a[i..]` and `b[j..]`, appending to `out`.
///
/// # Safety
/// `out` must hold only matches found in `a[..i]`-or-earlier windows whose partners lie in
/// `b[..j]` or vice versa (so none of them is found again), and have capacity for
/// `min(a.len(), b.len()) + INTERSECT_OUTPUT_SLACK_ENTRIES` entries: the loop writes one slot past
/// the matches before it knows whether the slot holds one, and there are at most min(a, b).
unsafe fn intersect_merge_scalar_from(
    a: &[u32],
    b: &[u32],
    mut i: usize,
    mut j: usize,
    out: &mut Vec<u32>,
) {
    let mut written = out.len();
    let destination = out.as_mut_ptr();
    while i < a.len() && j < b.len() {
        let x = a[i];
        let y = b[j];
        // The slot is written every step and kept only on a match, which avoids a branch the CPU
        // would mispredict about half the time on random lists. There are at most min(a, b)
        // matches, so the slot is within the capacity the caller guarantees.
        debug_assert!(written < out.capacity());
        unsafe { destination.add(written).write(x) };
        written += usize::from(x == y);
        i += usize::from(x <= y);
        j += usize::from(y <= x);
    }
    // SAFETY: the first `written` entries were all initialized above or before.
    unsafe { out.set_len(written) };
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    /// Entries per SSE register.
    const LANES: usize = 4;

    /// For each 4-bit mask of matching lanes, the `pshufb` control that moves those lanes, in
    /// order, to the front of the register.
    const COMPRESS_SHUFFLES: [[u8; 16]; 16] = build_compress_shuffles();

    const fn build_compress_shuffles() -> [[u8; 16]; 16] {
        let mut table = [[0x80u8; 16]; 16];
        let mut mask = 0;
        while mask < 16 {
            let mut target = 0;
            let mut lane = 0;
            while lane < LANES {
                if mask & (1 << lane) != 0 {
                    let mut byte = 0;
                    while byte < 4 {
                        table[mask][target * 4 + byte] = (lane * 4 + byte) as u8;
                        byte += 1;
                    }
                    target += 1;
                }
                lane += 1;
            }
            mask += 1;
        }
        table
    }

    /// Compares four entries of each list against each other per step (all sixteen pairs), stores
    /// the matches compressed, and advances whichever window has the smaller last entry (both
    /// when equal). A value can match at most once: the other list is strictly ascending, so its
    /// equal entry lies in exactly one window.
    ///
    /// # Safety
    /// The CPU must support SSSE3, and `out` must be empty with capacity of
    /// `min(a.len(), b.len()) + INTERSECT_OUTPUT_SLACK_ENTRIES` entries.
    #[target_feature(enable = "ssse3")]
    pub unsafe fn intersect_merge_ssse3(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
        debug_assert!(
            out.is_empty()
                && out.capacity() >= a.len().min(b.len()) + super::INTERSECT_OUTPUT_SLACK_ENTRIES
        );
        let mut i = 0;
        let mut j = 0;
        let mut written = 0;
        let destination = out.as_mut_ptr();
        while i + LANES <= a.len() && j + LANES <= b.len() {
            // SAFETY: both windows are in bounds by the loop condition. The store writes four
            // slots at `written`, and `written` never passes min(len a, len b), the number of
            // possible matches, so it stays within the capacity with its slack of four.
            unsafe {
                let window_a = _mm_loadu_si128(a.as_ptr().add(i).cast());
                let window_b = _mm_loadu_si128(b.as_ptr().add(j).cast());
                let rotated_1 = _mm_shuffle_epi32::<0b00_11_10_01>(window_b);
                let rotated_2 = _mm_shuffle_epi32::<0b01_00_11_10>(window_b);
                let rotated_3 = _mm_shuffle_epi32::<0b10_01_00_11>(window_b);
                let matches = _mm_or_si128(
                    _mm_or_si128(
                        _mm_cmpeq_epi32(window_a, window_b),
                        _mm_cmpeq_epi32(window_a, rotated_1),
                    ),
                    _mm_or_si128(
                        _mm_cmpeq_epi32(window_a, rotated_2),
                        _mm_cmpeq_epi32(window_a, rotated_3),
                    ),
                );
                let mask = _mm_movemask_ps(_mm_castsi128_ps(matches)) as usize;
                debug_assert!(written + LANES <= out.capacity());
                let shuffle = _mm_loadu_si128(COMPRESS_SHUFFLES[mask].as_ptr().cast());
                _mm_storeu_si128(
                    destination.add(written).cast(),
                    _mm_shuffle_epi8(window_a, shuffle),
                );
                written += mask.count_ones() as usize;
                let last_a = *a.get_unchecked(i + LANES - 1);
                let last_b = *b.get_unchecked(j + LANES - 1);
                i += usize::from(last_a <= last_b) * LANES;
                j += usize::from(last_b <= last_a) * LANES;
            }
        }
        // SAFETY: the first `written` slots hold matches. Each was found against a window of the
        // other list that lies before i or j, so the scalar tail cannot find it again.
        unsafe {
            out.set_len(written);
            super::intersect_merge_scalar_from(a, b, i, j, out);
        }
    }

    /// Merges two sorted registers into the four smallest and the four largest of their eight
    /// entries, each sorted: a bitonic merge network, three rounds of unsigned min and max.
    #[inline]
    #[target_feature(enable = "sse4.1")]
    fn merge_sorted_registers(a: __m128i, b: __m128i) -> (__m128i, __m128i) {
        // Reversing b makes a ++ reverse(b) bitonic; the first round splits it into two bitonic
        // halves, every entry of the low one no greater than any of the high one.
        let reversed_b = _mm_shuffle_epi32::<0b00_01_10_11>(b);
        let low = _mm_min_epu32(a, reversed_b);
        let high = _mm_max_epu32(a, reversed_b);
        // Second round: compare entries two apart, in both halves at once.
        let near = _mm_unpacklo_epi64(low, high);
        let far = _mm_unpackhi_epi64(low, high);
        let smaller = _mm_min_epu32(near, far);
        let larger = _mm_max_epu32(near, far);
        // Third round: compare neighbours, again in both halves at once.
        let low_pairs = _mm_unpacklo_epi32(smaller, larger);
        let high_pairs = _mm_unpackhi_epi32(smaller, larger);
        let near = _mm_unpacklo_epi64(low_pairs, high_pairs);
        let far = _mm_unpackhi_epi64(low_pairs, high_pairs);
        let smaller = _mm_min_epu32(near, far);
        let larger = _mm_max_epu32(near, far);
        (
            _mm_unpacklo_epi32(smaller, larger),
            _mm_unpackhi_epi32(smaller, larger),
        )
    }

    /// Stores the entries of a sorted register that differ from the entry before them (the first
    /// compared with `previous`) at `destination`, and returns how many it stored. Writes four
    /// slots whatever it keeps.
    ///
    /// # Safety
    /// `destination` must have room for four entries.
    #[inline]
    #[target_feature(enable = "sse4.1,ssse3")]
    unsafe fn store_unique(destination: *mut u32, sorted: __m128i, previous: u32) -> usize {
        let before = _mm_alignr_epi8::<12>(sorted, _mm_set1_epi32(previous as i32));
        let repeated = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(sorted, before))) as usize;
        let keep = repeated ^ 0b1111;
        let shuffle = unsafe { _mm_loadu_si128(COMPRESS_SHUFFLES[keep].as_ptr().cast()) };
        // SAFETY: the caller guarantees four slots.
        unsafe { _mm_storeu_si128(destination.cast(), _mm_shuffle_epi8(sorted, shuffle)) };
        keep.count_ones() as usize
    }

    /// Merges four entries at a time: the next four come from whichever list has the smaller
    /// next entry and are merged with the four largest so far, whose four smallest are final
    /// (every entry still unread is at least as large). Values in both lists meet next to each
    /// other in that sorted stream, where `store_unique` drops the second copy.
    ///
    /// # Safety
    /// The CPU must support SSE4.1 and SSSE3, and `out` must be empty with capacity of
    /// `a.len() + b.len()` entries.
    #[target_feature(enable = "sse4.1,ssse3")]
    pub unsafe fn union_merge_sse41(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
        debug_assert!(out.is_empty() && out.capacity() >= a.len() + b.len());
        if a.len() < LANES || b.len() < LANES {
            super::append_union_scalar(a, b, out);
            return;
        }
        let destination = out.as_mut_ptr();
        // SAFETY (for the loads in this function): each reads four entries at i or j, which the
        // loop conditions keep within the lists.
        let (low, mut high) =
            merge_sorted_registers(unsafe { _mm_loadu_si128(a.as_ptr().cast()) }, unsafe {
                _mm_loadu_si128(b.as_ptr().cast())
            });
        let first = _mm_cvtsi128_si32(low) as u32;
        // Any value other than the first entry makes the first entry count as new.
        let mut previous = first.wrapping_sub(1);
        // SAFETY (for every store): a store of four slots at `written` stays within the capacity
        // because `written + 4 <= i + j`: the four entries in `high` are read but not yet stored.
        let mut written = unsafe { store_unique(destination, low, previous) };
        previous = _mm_extract_epi32::<3>(low) as u32;
        let mut i = LANES;
        let mut j = LANES;
        while i + LANES <= a.len() && j + LANES <= b.len() {
            let take_a = a[i] <= b[j];
            let source = if take_a {
                a[i..].as_ptr()
            } else {
                b[j..].as_ptr()
            };
            let next = unsafe { _mm_loadu_si128(source.cast()) };
            i += usize::from(take_a) * LANES;
            j += usize::from(!take_a) * LANES;
            let (low, new_high) = merge_sorted_registers(next, high);
            high = new_high;
            debug_assert!(written + LANES <= out.capacity());
            written += unsafe { store_unique(destination.add(written), low, previous) };
            previous = _mm_extract_epi32::<3>(low) as u32;
        }
        // SAFETY: the first `written` slots were stored above.
        unsafe { out.set_len(written) };

        // What is left: the four in `high`, and the rest of each list, one of which has fewer
        // than four entries. Sort those few with `high`, drop repeats and anything already
        // stored, then merge them with the other list's rest.
        let mut pending = [0u32; 2 * LANES];
        // SAFETY: `pending` has room for the four entries.
        unsafe { _mm_storeu_si128(pending.as_mut_ptr().cast(), high) };
        let (few, many) = if a.len() - i < LANES {
            (&a[i..], &b[j..])
        } else {
            (&b[j..], &a[i..])
        };
        pending[LANES..LANES + few.len()].copy_from_slice(few);
        let pending = &mut pending[..LANES + few.len()];
        pending.sort_unstable();
        let mut unique = [0u32; 2 * LANES];
        let mut unique_count = 0;
        for &value in pending.iter() {
            if value != previous {
                unique[unique_count] = value;
                unique_count += 1;
                previous = value;
            }
        }
        // `previous` is now the largest value seen; only the first of `many` can repeat one.
        let last_stored = out.last().copied();
        let many = match many.first() {
            Some(&first) if Some(first) == last_stored => &many[1..],
            _ => many,
        };
        super::append_union_scalar(&unique[..unique_count], many, out);
    }
}

/// The positions in either strictly ascending list, ascending and unique. Unsorted input:
/// `POSTINGS_NOT_SORTED`.
pub fn union(a: &[u32], b: &[u32]) -> KernelResult<Vec<u32>> {
    check_sorted(a, "first list")?;
    check_sorted(b, "second list")?;
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let mut out = Vec::with_capacity(a.len() + b.len());
    if short.is_empty() {
        out.extend_from_slice(long);
    } else if long.len() / short.len() >= INTERSECT_GALLOP_RATIO {
        union_galloping(short, long, &mut out);
    } else {
        union_merge(a, b, &mut out);
    }
    Ok(out)
}

/// Copies the long list in runs between the entries of the short one, finding each run's end by
/// galloping, so the cost is mostly `memcpy`.
fn union_galloping(short: &[u32], long: &[u32], out: &mut Vec<u32>) {
    let mut base = 0;
    for &value in short {
        let index = base + first_not_less(&long[base..], value);
        out.extend_from_slice(&long[base..index]);
        out.push(value);
        base = index + usize::from(index < long.len() && long[index] == value);
    }
    out.extend_from_slice(&long[base..]);
}

/// Merges two lists of similar length, with SIMD when the CPU has it.
fn union_merge(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.1")
            && std::arch::is_x86_feature_detected!("ssse3")
        {
            // SAFETY: the CPU supports SSE4.1 and SSSE3, checked just above.
            unsafe { simd::union_merge_sse41(a, b, out) };
            return;
        }
    }
    append_union_scalar(a, b, out);
}

/// Appends the union of two strictly ascending lists to `out` with a branchless merge.
fn append_union_scalar(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
    out.reserve(a.len() + b.len());
    let start = out.len();
    let mut written = 0;
    let mut i = 0;
    let mut j = 0;
    while i < a.len() && j < b.len() {
        let x = a[i];
        let y = b[j];
        // SAFETY: every step writes one slot and advances i or j (or both), so `written` stays
        // below i + j < len a + len b, which `reserve` made room for after `start`.
        debug_assert!(start + written < out.capacity());
        unsafe { out.as_mut_ptr().add(start + written).write(x.min(y)) };
        written += 1;
        i += usize::from(x <= y);
        j += usize::from(y <= x);
    }
    // SAFETY: the `written` slots after `start` were initialized above.
    unsafe { out.set_len(start + written) };
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so the tests need no dependency and always see the same
    /// lists.
    struct SplitMix(u64);

    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// `count` distinct sorted values below `universe`.
        fn sorted_list(&mut self, count: usize, universe: u64) -> Vec<u32> {
            let mut values: Vec<u32> = (0..count)
                .map(|_| (self.next() % universe) as u32)
                .collect();
            values.sort_unstable();
            values.dedup();
            values
        }
    }

    fn naive_intersection(a: &[u32], b: &[u32]) -> Vec<u32> {
        a.iter()
            .copied()
            .filter(|x| b.binary_search(x).is_ok())
            .collect()
    }

    fn naive_union(a: &[u32], b: &[u32]) -> Vec<u32> {
        let mut all: Vec<u32> = a.iter().chain(b).copied().collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    #[test]
    fn varint_lengths_match_the_encoding() {
        for value in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            2_097_151,
            2_097_152,
            u32::MAX,
        ] {
            let mut out = Vec::new();
            push_varint(&mut out, value);
            assert_eq!(out.len(), varint_length(value), "{value}");
            assert_eq!(
                Reader {
                    bytes: &out,
                    position: 0
                }
                .read_varint("v"),
                Ok(value)
            );
        }
    }

    #[test]
    fn plain_form_bytes_are_as_documented() {
        assert_eq!(encode(&[]).unwrap(), vec![0x00, 0x00]);
        assert_eq!(encode(&[0]).unwrap(), vec![0x00, 0x01, 0x00]);
        assert_eq!(
            encode(&[5, 6, 300]).unwrap(),
            vec![0x00, 0x03, 0x05, 0x01, 0xA6, 0x02]
        );
        assert_eq!(
            encode(&[u32::MAX]).unwrap(),
            vec![0x00, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]
        );
    }

    #[test]
    fn block_form_bytes_are_as_documented() {
        // 130 entries 1..=130: a full block of 128 and a block of 2.
        let positions: Vec<u32> = (1..=130).collect();
        let encoded = encode(&positions).unwrap();
        let mut expected = vec![0x01, 130, 0x01];
        // Directory: block 0 ends at 128 (varint 0x80 0x01) with 128 one-byte bodies; block 1
        // ends 2 later with a 2-byte body.
        expected.extend_from_slice(&[0x80, 0x01, 0x80, 0x01, 0x02, 0x02]);
        expected.extend(std::iter::repeat_n(0x01, 130));
        assert_eq!(encoded, expected);
        assert_eq!(decode(&encoded).unwrap(), positions);
    }

    #[test]
    fn form_switches_at_the_threshold() {
        let below: Vec<u32> = (0..POSTINGS_BLOCK_THRESHOLD_ENTRIES as u32 - 1).collect();
        let at: Vec<u32> = (0..POSTINGS_BLOCK_THRESHOLD_ENTRIES as u32).collect();
        assert_eq!(encode(&below).unwrap()[0], FORM_PLAIN);
        assert_eq!(encode(&at).unwrap()[0], FORM_BLOCK);
        // A length in the other form's range is corrupt.
        let mut short_in_block_form = vec![FORM_BLOCK, 0x02, 0x02, 0x02, 0x01, 0x01];
        assert_eq!(
            decode(&short_in_block_form).unwrap_err().code,
            ErrorCode::Corrupt
        );
        short_in_block_form[0] = FORM_PLAIN;
        assert_eq!(
            decode(&short_in_block_form).unwrap_err().code,
            ErrorCode::Corrupt
        );
        let mut long_in_plain_form = vec![FORM_PLAIN, 0x80, 0x01];
        long_in_plain_form.extend(std::iter::repeat_n(0x01, 128));
        assert_eq!(
            decode(&long_in_plain_form).unwrap_err().code,
            ErrorCode::Corrupt
        );
    }

    #[test]
    fn round_trips_random_lists() {
        let mut random = SplitMix(7);
        for count in [0, 1, 2, 127, 128, 129, 255, 256, 257, 1000, 5000] {
            for universe in [10_000u64, 1 << 32] {
                let positions = random.sorted_list(count, universe);
                let encoded = encode(&positions).unwrap();
                assert_eq!(decode(&encoded).unwrap(), positions, "count {count}");
            }
        }
    }

    #[test]
    fn encode_rejects_unsorted_positions() {
        for bad in [&[1u32, 1][..], &[3, 2], &[0, 5, 9, 9, 10]] {
            assert_eq!(encode(bad).unwrap_err().code, ErrorCode::PostingsNotSorted);
        }
        let mut long: Vec<u32> = (0..2000).collect();
        long[1500] = 1;
        assert_eq!(first_unsorted_index(&long), Some(1500));
        assert_eq!(
            encode(&long).unwrap_err().code,
            ErrorCode::PostingsNotSorted
        );
    }

    #[test]
    fn decode_rejects_corrupt_lists() {
        let good_block = encode(&(0..300).collect::<Vec<u32>>()).unwrap();
        let mut trailing = encode(&[1, 2, 3]).unwrap();
        trailing.push(0);
        let mut wrong_directory = good_block.clone();
        wrong_directory[3] ^= 1;
        let mut wrong_body_length = good_block.clone();
        wrong_body_length[4] ^= 1;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty input", vec![]),
            ("unknown form", vec![0x02, 0x00]),
            ("truncated count", vec![0x00, 0x80]),
            (
                "varint longer than 5 bytes",
                vec![0x00, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
            ),
            (
                "varint past 2^32 - 1",
                vec![0x00, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0x10],
            ),
            ("count larger than entries", vec![0x00, 0x03, 0x01, 0x01]),
            ("count smaller than entries", vec![0x00, 0x01, 0x01, 0x01]),
            ("repeated position", vec![0x00, 0x02, 0x01, 0x00]),
            (
                "position overflow",
                vec![0x00, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01],
            ),
            ("trailing bytes", trailing),
            ("directory disagrees", wrong_directory),
            ("body length disagrees", wrong_body_length),
            (
                "truncated block list",
                good_block[..good_block.len() - 1].to_vec(),
            ),
            ("huge count", vec![0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]),
        ];
        for (name, bytes) in cases {
            let error = decode(&bytes).unwrap_err();
            assert_eq!(error.code, ErrorCode::Corrupt, "{name}");
        }
    }

    #[test]
    fn intersect_and_union_agree_with_naive_versions() {
        let mut random = SplitMix(42);
        let shapes = [
            (0, 0, 100u64),
            (0, 50, 100),
            (1, 1, 2),
            (3, 5, 10),
            (100, 100, 150),
            (1000, 1000, 3000),
            (1000, 1000, 1 << 32),
            (10, 5000, 20_000),
            (50, 50 * INTERSECT_GALLOP_RATIO, 10_000),
            (50, 50 * INTERSECT_GALLOP_RATIO - 1, 10_000),
            (7, 100_000, 200_000),
            (3000, 3001, 4000),
        ];
        for (left, right, universe) in shapes {
            let a = random.sorted_list(left, universe);
            let b = random.sorted_list(right, universe);
            let expected = naive_intersection(&a, &b);
            assert_eq!(intersect(&a, &b).unwrap(), expected, "{left} ∩ {right}");
            assert_eq!(intersect(&b, &a).unwrap(), expected, "{right} ∩ {left}");
            assert_eq!(
                union(&a, &b).unwrap(),
                naive_union(&a, &b),
                "{left} ∪ {right}"
            );
        }
        let all: Vec<u32> = (0..1000).collect();
        assert_eq!(intersect(&all, &all).unwrap(), all);
        assert_eq!(union(&all, &all).unwrap(), all);
        assert_eq!(intersect(&all, &[u32::MAX]).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn intersect_and_union_agree_with_naive_versions_on_many_small_lists() {
        let mut random = SplitMix(11);
        for round in 0..5000 {
            let left = (random.next() % 40) as usize;
            let right = (random.next() % 40) as usize;
            let universe = 1 + random.next() % 80;
            // Shift some rounds to the top of the u32 range, where wrapping would show.
            let offset = if round % 3 == 0 {
                u32::MAX - universe as u32 + 1
            } else {
                0
            };
            let shift = |list: Vec<u32>| list.into_iter().map(|v| v + offset).collect::<Vec<u32>>();
            let a = shift(random.sorted_list(left, universe));
            let b = shift(random.sorted_list(right, universe));
            assert_eq!(
                intersect(&a, &b).unwrap(),
                naive_intersection(&a, &b),
                "{a:?} ∩ {b:?}"
            );
            assert_eq!(union(&a, &b).unwrap(), naive_union(&a, &b), "{a:?} ∪ {b:?}");
        }
    }

    #[test]
    fn scalar_union_agrees_with_naive_union() {
        let mut random = SplitMix(5);
        for _ in 0..200 {
            let a = random.sorted_list(100, 300);
            let b = random.sorted_list(90, 300);
            let mut out = vec![u32::MAX];
            append_union_scalar(&a, &b, &mut out);
            assert_eq!(out[0], u32::MAX);
            assert_eq!(&out[1..], naive_union(&a, &b).as_slice());
        }
    }

    #[test]
    fn scalar_merge_agrees_with_simd_merge() {
        let mut random = SplitMix(3);
        for _ in 0..50 {
            let a = random.sorted_list(300, 800);
            let b = random.sorted_list(280, 800);
            let mut out = Vec::with_capacity(a.len().min(b.len()) + INTERSECT_OUTPUT_SLACK_ENTRIES);
            // SAFETY: `out` is empty with the room required.
            unsafe { intersect_merge_scalar_from(&a, &b, 0, 0, &mut out) };
            assert_eq!(out, naive_intersection(&a, &b));
        }
    }

    #[test]
    fn intersect_and_union_reject_unsorted_lists() {
        let sorted = [1, 2, 3];
        let unsorted = [3, 2, 1];
        for (a, b) in [(&sorted, &unsorted), (&unsorted, &sorted)] {
            assert_eq!(
                intersect(a, b).unwrap_err().code,
                ErrorCode::PostingsNotSorted
            );
            assert_eq!(union(a, b).unwrap_err().code, ErrorCode::PostingsNotSorted);
        }
        // Even when galloping would never look at the unsorted part.
        let mut long: Vec<u32> = (0..10_000).collect();
        long[9000] = 0;
        assert_eq!(
            intersect(&[1], &long).unwrap_err().code,
            ErrorCode::PostingsNotSorted
        );
    }
}
