//! CRC-32 (IEEE 802.3, zlib's) and CRC-32C (Castagnoli), both continuing from a seed.
//!
//! The seed is the finished CRC of the bytes before, exactly as `zlib.crc32(bytes, seed)` takes
//! it, so `crc(b, crc(a, 0)) == crc(a ++ b, 0)`.

use crate::error::{KernelError, KernelResult};

/// CRC-32 (IEEE) of `bytes`, continuing from `seed`. `crc32fast` picks a PCLMULQDQ folding
/// implementation at run time when the CPU has it, and a table one otherwise.
pub fn crc32(bytes: &[u8], seed: u32) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(seed);
    hasher.update(bytes);
    hasher.finalize()
}

/// The reflected CRC-32C polynomial (Castagnoli).
const CRC32C_POLYNOMIAL_REFLECTED: u32 = 0x82F6_3B78;

/// Tables for slicing-by-8: table `k` holds the CRC of byte `b` followed by `k` zero bytes, so
/// eight bytes fold into the state with eight independent look-ups.
const CRC32C_SLICING_TABLES: [[u32; 256]; 8] = build_slicing_tables();

const fn build_slicing_tables() -> [[u32; 256]; 8] {
    let mut tables = [[0u32; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ CRC32C_POLYNOMIAL_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut table = 1;
    while table < 8 {
        let mut byte = 0;
        while byte < 256 {
            let previous = tables[table - 1][byte];
            tables[table][byte] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            byte += 1;
        }
        table += 1;
    }
    tables
}

/// CRC-32C of `bytes`, continuing from `seed`. Uses the SSE4.2 `crc32` instruction when the CPU
/// has it, and slicing-by-8 tables otherwise; both give the same value.
pub fn crc32c(bytes: &[u8], seed: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU supports SSE4.2, checked just above.
            return !unsafe { crc32c_update_sse42(!seed, bytes) };
        }
    }
    !crc32c_update_table(!seed, bytes)
}

/// Folds `bytes` into the raw (inverted) CRC-32C state with the slicing-by-8 tables.
fn crc32c_update_table(mut state: u32, bytes: &[u8]) -> u32 {
    let tables = &CRC32C_SLICING_TABLES;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let low = state ^ u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        state = tables[7][(low & 0xFF) as usize]
            ^ tables[6][((low >> 8) & 0xFF) as usize]
            ^ tables[5][((low >> 16) & 0xFF) as usize]
            ^ tables[4][(low >> 24) as usize]
            ^ tables[3][chunk[4] as usize]
            ^ tables[2][chunk[5] as usize]
            ^ tables[1][chunk[6] as usize]
            ^ tables[0][chunk[7] as usize];
    }
    for &byte in chunks.remainder() {
        state = (state >> 8) ^ tables[0][((state ^ byte as u32) & 0xFF) as usize];
    }
    state
}

/// Folds `bytes` into the raw (inverted) CRC-32C state eight bytes per instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_update_sse42(state: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut wide_state = state as u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        wide_state = _mm_crc32_u64(wide_state, u64::from_le_bytes(word));
    }
    // The instruction keeps the state in the low 32 bits; the high half is always zero.
    let mut narrow_state = wide_state as u32;
    for &byte in chunks.remainder() {
        narrow_state = _mm_crc32_u8(narrow_state, byte);
    }
    narrow_state
}

/// Checks ranges `[ranges[2i], ranges[2i + 1])` against a buffer of `length` bytes.
fn check_ranges(ranges: &[u32], length: usize) -> KernelResult<()> {
    if !ranges.len().is_multiple_of(2) {
        return Err(KernelError::invalid_argument(format!(
            "ranges come in start and end pairs, but {} offsets were given",
            ranges.len()
        )));
    }
    for (index, pair) in ranges.chunks_exact(2).enumerate() {
        if pair[0] > pair[1] || pair[1] as usize > length {
            return Err(KernelError::invalid_argument(format!(
                "range {index} [{}, {}) is reversed or runs past the {length} bytes",
                pair[0], pair[1]
            )));
        }
    }
    Ok(())
}

/// Checks that `out` holds exactly `expected` values.
fn check_out(out: &[u32], expected: usize) -> KernelResult<()> {
    if out.len() != expected {
        return Err(KernelError::invalid_argument(format!(
            "the output holds {} values, not the {expected} the ranges give",
            out.len()
        )));
    }
    Ok(())
}

/// CRC-32C of each range `[ranges[2i], ranges[2i + 1])` of `bytes`: one call for the checksums
/// of a whole manifest frame's entries.
pub fn crc32c_ranges(bytes: &[u8], ranges: &[u32]) -> KernelResult<Vec<u32>> {
    let mut out = vec![0; ranges.len() / 2];
    crc32c_ranges_into(bytes, ranges, &mut out)?;
    Ok(out)
}

/// `crc32c_ranges` into `out` (one value per range), which the caller owns: the binding fills a
/// buffer JavaScript made, because making a typed array from Rust costs more than the CRCs of a
/// small run.
pub fn crc32c_ranges_into(bytes: &[u8], ranges: &[u32], out: &mut [u32]) -> KernelResult<()> {
    check_ranges(ranges, bytes.len())?;
    check_out(out, ranges.len() / 2)?;
    for (pair, value) in ranges.chunks_exact(2).zip(out.iter_mut()) {
        *value = crc32c(&bytes[pair[0] as usize..pair[1] as usize], 0);
    }
    Ok(())
}

/// CRC-32C and CRC-32 of each range `[ranges[2i], ranges[2i + 1])` of `bytes`, interleaved
/// (`out[2i]` the CRC-32C, `out[2i + 1]` the CRC-32): what a run needs of each payload (its
/// dedup hash and its default fingerprint) in one call for the whole run.
pub fn payload_checksums(bytes: &[u8], ranges: &[u32]) -> KernelResult<Vec<u32>> {
    let mut out = vec![0; ranges.len()];
    payload_checksums_into(bytes, ranges, &mut out)?;
    Ok(out)
}

/// `payload_checksums` into `out` (two values per range), which the caller owns.
pub fn payload_checksums_into(bytes: &[u8], ranges: &[u32], out: &mut [u32]) -> KernelResult<()> {
    check_ranges(ranges, bytes.len())?;
    check_out(out, ranges.len())?;
    for (pair, values) in ranges.chunks_exact(2).zip(out.chunks_exact_mut(2)) {
        let item = &bytes[pair[0] as usize..pair[1] as usize];
        values[0] = crc32c(item, 0);
        values[1] = crc32(item, 0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_give_each_range_its_own_crcs() {
        let bytes = b"hello, world123456789";
        let ranges = [0u32, 5, 5, 12, 12, 21, 3, 3];
        let crcs = crc32c_ranges(bytes, &ranges).unwrap();
        assert_eq!(
            crcs,
            vec![crc32c(b"hello", 0), crc32c(b", world", 0), 0xE306_9283, 0]
        );
        let both = payload_checksums(bytes, &ranges).unwrap();
        assert_eq!(both.len(), 8);
        assert_eq!(&both[4..6], &[0xE306_9283, 0xCBF4_3926]);
        assert_eq!(both[2], crc32c(b", world", 0));
        assert_eq!(both[3], crc32(b", world", 0));
    }

    #[test]
    fn into_variants_fill_the_callers_buffer_and_refuse_one_of_the_wrong_size() {
        let bytes = b"hello, world123456789";
        let ranges = [0u32, 5, 12, 21];
        let mut single = [7u32; 2];
        crc32c_ranges_into(bytes, &ranges, &mut single).unwrap();
        assert_eq!(single.to_vec(), crc32c_ranges(bytes, &ranges).unwrap());
        let mut both = [7u32; 4];
        payload_checksums_into(bytes, &ranges, &mut both).unwrap();
        assert_eq!(both.to_vec(), payload_checksums(bytes, &ranges).unwrap());
        for wrong in [1usize, 3] {
            let mut out = vec![0u32; wrong];
            assert!(crc32c_ranges_into(bytes, &ranges, &mut out).is_err());
            assert!(payload_checksums_into(bytes, &ranges, &mut out).is_err());
        }
    }

    #[test]
    fn ranges_that_do_not_fit_are_refused() {
        for ranges in [&[0u32, 5, 1][..], &[4, 2], &[0, 22]] {
            let error = crc32c_ranges(b"hello, world123456789", ranges).unwrap_err();
            assert_eq!(error.code, crate::error::ErrorCode::InvalidArgument);
            assert_eq!(
                payload_checksums(b"hello, world123456789", ranges)
                    .unwrap_err()
                    .code,
                crate::error::ErrorCode::InvalidArgument
            );
        }
        assert_eq!(crc32c_ranges(b"", &[]).unwrap(), Vec::<u32>::new());
    }

    /// The standard check input of CRC catalogues.
    const CHECK_INPUT: &[u8] = b"123456789";

    #[test]
    fn crc32_matches_known_values() {
        assert_eq!(crc32(b"", 0), 0);
        assert_eq!(crc32(CHECK_INPUT, 0), 0xCBF4_3926);
        assert_eq!(crc32(b"hello", 0), 907_060_870);
    }

    #[test]
    fn crc32_continues_from_a_seed() {
        let whole = crc32(b"hello, world", 0);
        let first = crc32(b"hello", 0);
        assert_eq!(crc32(b", world", first), whole);
        assert_eq!(crc32(b"", first), first);
    }

    #[test]
    fn crc32c_matches_known_values() {
        assert_eq!(crc32c(b"", 0), 0);
        assert_eq!(crc32c(CHECK_INPUT, 0), 0xE306_9283);
        // RFC 3720 (iSCSI) test vector: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32], 0), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32], 0), 0x62A8_AB43);
    }

    #[test]
    fn crc32c_continues_from_a_seed_and_both_paths_agree() {
        let data: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let whole = crc32c(&data, 0);
        for split in [0, 1, 7, 8, 9, 63, 500, 999, 1000] {
            let first = crc32c(&data[..split], 0);
            assert_eq!(crc32c(&data[split..], first), whole, "split at {split}");
        }
        for length in 0..64 {
            let expected = !crc32c_update_table(!0x1234_5678, &data[..length]);
            assert_eq!(
                crc32c(&data[..length], 0x1234_5678),
                expected,
                "length {length}"
            );
        }
    }
}
