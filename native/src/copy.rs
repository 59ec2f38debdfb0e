//! Copying a range of one buffer into another. JavaScript's `TypedArray.prototype.set` copies
//! byte by byte when the two ranges start at different offsets modulo the word size, and always
//! so from a `SharedArrayBuffer`: a third of the speed of `memcpy`, which an export paid on every
//! payload it gathered into a column.

use crate::error::{KernelError, KernelResult};

/// Copies `source[start..end]` into `target` at `target_at`. A range that is reversed or runs
/// past either buffer is `INVALID_ARGUMENT`, and nothing is copied.
pub fn copy_range(
    target: &mut [u8],
    target_at: usize,
    source: &[u8],
    start: usize,
    end: usize,
) -> KernelResult<()> {
    if start > end || end > source.len() {
        return Err(KernelError::invalid_argument(format!(
            "source range {start}..{end} is not within a buffer of {} bytes",
            source.len()
        )));
    }
    let length = end - start;
    let target_end = target_at
        .checked_add(length)
        .filter(|&target_end| target_end <= target.len())
        .ok_or_else(|| {
            KernelError::invalid_argument(format!(
                "{length} bytes at {target_at} do not fit in a buffer of {} bytes",
                target.len()
            ))
        })?;
    target[target_at..target_end].copy_from_slice(&source[start..end]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn copies_the_range_at_any_alignment() {
        let source: Vec<u8> = (0..=255).collect();
        for target_at in 0..9 {
            let mut target = vec![0xAA; 300];
            copy_range(&mut target, target_at, &source, 3, 203).unwrap();
            assert_eq!(&target[target_at..target_at + 200], &source[3..203]);
            assert!(target[..target_at].iter().all(|&byte| byte == 0xAA));
            assert!(target[target_at + 200..].iter().all(|&byte| byte == 0xAA));
        }
        let mut target = [7u8; 4];
        copy_range(&mut target, 4, &source, 10, 10).unwrap();
        assert_eq!(target, [7u8; 4]);
    }

    #[test]
    fn refuses_ranges_outside_either_buffer_and_copies_nothing() {
        let source = [1u8; 16];
        let mut target = [0u8; 8];
        for (target_at, start, end) in [(0, 4, 2), (0, 0, 17), (1, 0, 8), (usize::MAX, 0, 1)] {
            let error = copy_range(&mut target, target_at, &source, start, end).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidArgument);
            assert_eq!(target, [0u8; 8]);
        }
    }
}
