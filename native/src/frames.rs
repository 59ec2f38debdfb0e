//! Frame checksums: every frame is `u32le length` (bit 31 marks a control record, bits 0-30 the
//! data length), `u32le crc32(data)`, then the data (docs/formats.md, "Frames").

use crate::crc::crc32;
use crate::error::{KernelError, KernelResult};

/// Bytes of a frame header: the length field and the CRC field.
pub const FRAME_HEADER_BYTES: usize = 8;

/// The top bit of the length field marks a control record and is not part of the length.
pub const FRAME_CONTROL_BIT: u32 = 0x8000_0000;

/// The other 31 bits of the length field are the data length in bytes.
pub const FRAME_LENGTH_MASK: u32 = 0x7FFF_FFFF;

/// Offset of the CRC field inside the header, in bytes.
const FRAME_CRC_OFFSET_BYTES: usize = 4;

/// Where a frame's data lies in the buffer, or `None` when its header or data runs past the end.
fn frame_data_range(buffer: &[u8], offset: usize) -> Option<std::ops::Range<usize>> {
    let header_end = offset.checked_add(FRAME_HEADER_BYTES)?;
    let header = buffer.get(offset..header_end)?;
    let length_field = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let data_end = header_end.checked_add((length_field & FRAME_LENGTH_MASK) as usize)?;
    if data_end > buffer.len() {
        return None;
    }
    Some(header_end..data_end)
}

/// Fills in the CRC field of every frame that starts at one of `frame_offsets`, in order.
///
/// A frame that does not fit is `INVALID_ARGUMENT`; the frames before it have their CRCs written
/// by then, exactly as in the TypeScript twin.
pub fn write_frame_checksums(buffer: &mut [u8], frame_offsets: &[u32]) -> KernelResult<()> {
    for (index, &offset) in frame_offsets.iter().enumerate() {
        let offset = offset as usize;
        let Some(data) = frame_data_range(buffer, offset) else {
            return Err(KernelError::invalid_argument(format!(
                "frame {index} at offset {offset} does not fit in a buffer of {} bytes",
                buffer.len()
            )));
        };
        let checksum = crc32(&buffer[data], 0);
        let crc_field = offset + FRAME_CRC_OFFSET_BYTES;
        buffer[crc_field..crc_field + 4].copy_from_slice(&checksum.to_le_bytes());
    }
    Ok(())
}

/// Returns the index of the first frame that runs past the buffer or whose CRC does not match
/// its data, or `None` when every frame is sound.
pub fn verify_frame_checksums(buffer: &[u8], frame_offsets: &[u32]) -> Option<usize> {
    frame_offsets.iter().position(|&offset| {
        let offset = offset as usize;
        match frame_data_range(buffer, offset) {
            None => true,
            Some(data) => {
                let crc_field = offset + FRAME_CRC_OFFSET_BYTES;
                let stored = u32::from_le_bytes([
                    buffer[crc_field],
                    buffer[crc_field + 1],
                    buffer[crc_field + 2],
                    buffer[crc_field + 3],
                ]);
                crc32(&buffer[data], 0) != stored
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    /// Appends a frame with a zeroed CRC field and returns its offset.
    fn push_frame(buffer: &mut Vec<u8>, data: &[u8], control: bool) -> u32 {
        let offset = buffer.len() as u32;
        let length = data.len() as u32 | if control { FRAME_CONTROL_BIT } else { 0 };
        buffer.extend_from_slice(&length.to_le_bytes());
        buffer.extend_from_slice(&[0; 4]);
        buffer.extend_from_slice(data);
        offset
    }

    #[test]
    fn written_checksums_verify_and_match_crc32() {
        let mut buffer = Vec::new();
        let offsets = [
            push_frame(&mut buffer, b"hello", false),
            push_frame(&mut buffer, b"", false),
            push_frame(&mut buffer, b"control", true),
        ];
        assert_eq!(verify_frame_checksums(&buffer, &offsets), Some(0));
        write_frame_checksums(&mut buffer, &offsets).unwrap();
        assert_eq!(&buffer[4..8], &907_060_870u32.to_le_bytes());
        // The empty frame's CRC is the CRC of nothing, which is zero.
        assert_eq!(&buffer[17..21], &[0, 0, 0, 0]);
        assert_eq!(verify_frame_checksums(&buffer, &offsets), None);
        assert_eq!(verify_frame_checksums(&buffer, &[]), None);
    }

    #[test]
    fn verify_reports_the_first_bad_frame() {
        let mut buffer = Vec::new();
        let offsets = [
            push_frame(&mut buffer, b"one", false),
            push_frame(&mut buffer, b"two", false),
        ];
        write_frame_checksums(&mut buffer, &offsets).unwrap();
        let last = buffer.len() - 1;
        buffer[last] ^= 1;
        assert_eq!(verify_frame_checksums(&buffer, &offsets), Some(1));
        assert_eq!(
            verify_frame_checksums(&buffer, &[0, buffer.len() as u32 - 3]),
            Some(1)
        );
        assert_eq!(verify_frame_checksums(&buffer, &[u32::MAX]), Some(0));
    }

    #[test]
    fn write_rejects_frames_that_do_not_fit() {
        let mut buffer = Vec::new();
        let good = push_frame(&mut buffer, b"fits", false);
        let truncated = push_frame(&mut buffer, b"truncated", false);
        buffer.truncate(buffer.len() - 1);
        let error = write_frame_checksums(&mut buffer, &[good, truncated]).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        // The frame before the bad one was written, as the TypeScript twin does.
        assert_eq!(verify_frame_checksums(&buffer, &[good]), None);
        let header_only = [buffer.len() as u32 - 4];
        let error = write_frame_checksums(&mut buffer, &header_only).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
    }
}
