//! Writes for files opened with `O_DIRECT`, which bypass the page cache: the device takes the
//! bytes by DMA from the process's memory, where a buffered write first copies them into page
//! cache pages the kernel must find, fault in and later write back. For an export's gigabytes,
//! written once and not read again by the store, that copy was a third of the export's CPU time,
//! and the pages it filled pushed the store's own data out of the cache.
//!
//! `O_DIRECT` asks that the memory, the file offset and the length be multiples of the device's
//! logical block size. JavaScript cannot place a buffer at an aligned address, so the bytes are
//! copied here into an aligned buffer (from a small pool, whose pages stay mapped and warm), the
//! last block padded with zeros; the caller truncates the file to its length at the end.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::Mutex;

use crate::durable::{self, DurableWriteError};
use crate::error::{KernelError, KernelResult};

/// The alignment of every direct write's memory, offset and length: a multiple of every common
/// logical block size (512 and 4096 bytes). Equal to `directIoAlignmentBytes` in `limits.ts`.
pub const DIRECT_ALIGNMENT_BYTES: usize = 4096;

/// Aligned buffers kept for the next writes: as many as the writes a process keeps in flight
/// (two export files, each with a few writes queued), so that steady writing allocates nothing.
const POOLED_BUFFERS_MAX: usize = 16;

/// Buffers are made in whole multiples of this size, so that writes of nearby sizes (an NDJSON
/// export's come a batch's lines at a time, each a little longer or shorter) reuse the same
/// buffers: made to each write's own size, a slightly longer write found none that fit, and a
/// fresh allocation cost a page fault and a zeroed page per 4 KiB, more than the copy into it.
const BUFFER_GRANULE_BYTES: usize = 1024 * 1024;

/// … and no more bytes than this in all: the pool lives as long as the process, and an Arrow
/// export's largest writes (a group's payload buffer, 10 MB and more) must not stay held by a
/// process that exported once.
const POOLED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Bytes at an aligned address, their length a multiple of `DIRECT_ALIGNMENT_BYTES`.
pub struct AlignedBuffer {
    pointer: NonNull<u8>,
    capacity: usize,
    length: usize,
}

// SAFETY: the buffer owns its allocation alone; nothing else points into it.
unsafe impl Send for AlignedBuffer {}

impl AlignedBuffer {
    fn layout(capacity: usize) -> Layout {
        Layout::from_size_align(capacity, DIRECT_ALIGNMENT_BYTES).expect("a valid layout")
    }

    fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(DIRECT_ALIGNMENT_BYTES);
        // SAFETY: the layout's size is not zero.
        let pointer = unsafe { alloc::alloc(Self::layout(capacity)) };
        let pointer = NonNull::new(pointer)
            .unwrap_or_else(|| alloc::handle_alloc_error(Self::layout(capacity)));
        Self {
            pointer,
            capacity,
            length: 0,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `length` bytes are within the allocation and were written by `fill`.
        unsafe { std::slice::from_raw_parts(self.pointer.as_ptr(), self.length) }
    }

    /// Sets the contents to the `pieces` one after another, followed by zeros up to the next
    /// multiple of the alignment.
    fn fill(&mut self, pieces: &[&[u8]]) {
        let data_length: usize = pieces.iter().map(|piece| piece.len()).sum();
        let length = padded_length(data_length);
        assert!(
            length <= self.capacity,
            "an aligned buffer too small for its data"
        );
        // SAFETY: `length` bytes fit in the allocation, which nothing else borrows.
        let whole = unsafe { std::slice::from_raw_parts_mut(self.pointer.as_ptr(), length) };
        let mut at = 0;
        for piece in pieces {
            whole[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        whole[at..].fill(0);
        self.length = length;
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_capacity` with this very layout.
        unsafe { alloc::dealloc(self.pointer.as_ptr(), Self::layout(self.capacity)) }
    }
}

/// `length` rounded up to a multiple of `DIRECT_ALIGNMENT_BYTES`.
pub fn padded_length(length: usize) -> usize {
    length.div_ceil(DIRECT_ALIGNMENT_BYTES) * DIRECT_ALIGNMENT_BYTES
}

static POOL: Mutex<Vec<AlignedBuffer>> = Mutex::new(Vec::new());

/// The `pieces`, one after another, in an aligned buffer, padded with zeros to a whole number of
/// blocks, ready to write at `position`, which must itself be a multiple of the alignment
/// (`INVALID_ARGUMENT` if not). Pieces let a caller that gathers a block's start of its own
/// hand it over with the bytes that follow, copied once, here.
pub fn aligned_copy(position: u64, pieces: &[&[u8]]) -> KernelResult<AlignedBuffer> {
    if !position.is_multiple_of(DIRECT_ALIGNMENT_BYTES as u64) {
        return Err(KernelError::invalid_argument(format!(
            "a direct write's position {position} is not a multiple of {DIRECT_ALIGNMENT_BYTES} bytes"
        )));
    }
    let needed = padded_length(pieces.iter().map(|piece| piece.len()).sum());
    let pooled = {
        let mut pool = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let fits = pool.iter().position(|buffer| buffer.capacity >= needed);
        fits.map(|index| pool.swap_remove(index))
    };
    let mut buffer = pooled.unwrap_or_else(|| AlignedBuffer::with_capacity(capacity_for(needed)));
    buffer.fill(pieces);
    Ok(buffer)
}

/// The capacity of a buffer made for `needed` bytes: whole granules (see `BUFFER_GRANULE_BYTES`).
fn capacity_for(needed: usize) -> usize {
    needed.max(1).next_multiple_of(BUFFER_GRANULE_BYTES)
}

/// Gives a buffer back for the next write, unless the pool is full (in buffers or in bytes).
pub fn release(buffer: AlignedBuffer) {
    let mut pool = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let pooled_bytes: usize = pool.iter().map(|kept| kept.capacity).sum();
    if pool.len() < POOLED_BUFFERS_MAX && pooled_bytes + buffer.capacity <= POOLED_BYTES_MAX {
        pool.push(buffer);
    }
}

/// How many buffers the pool holds, and their bytes.
pub fn pooled() -> (usize, usize) {
    let pool = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    (pool.len(), pool.iter().map(|kept| kept.capacity).sum())
}

/// Writes the buffer at byte `position` of the open file `descriptor` (looping over short writes
/// and interruptions). It does not sync: a direct write reaches the device, not necessarily its
/// platter, and the file's length is metadata; the caller syncs the file when it is whole.
pub fn write_at(
    descriptor: i32,
    position: u64,
    buffer: &AlignedBuffer,
) -> Result<(), DurableWriteError> {
    durable::write_at(descriptor, position, buffer.as_slice()).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;

    fn temporary_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("streamstack-direct-{}-{name}", std::process::id()))
    }

    #[test]
    fn copies_into_aligned_memory_padded_with_zeros() {
        let data: Vec<u8> = (0..5000u32).map(|index| (index % 251) as u8 + 1).collect();
        let buffer = aligned_copy(8192, &[&data[..]]).unwrap();
        assert_eq!(
            buffer.as_slice().as_ptr() as usize % DIRECT_ALIGNMENT_BYTES,
            0
        );
        assert_eq!(buffer.as_slice().len(), 8192);
        assert_eq!(&buffer.as_slice()[..5000], &data[..]);
        assert!(buffer.as_slice()[5000..].iter().all(|&byte| byte == 0));
        // A pooled buffer that held longer data is padded anew, not left with the old bytes.
        release(buffer);
        let again = aligned_copy(0, &[&[7u8; 10]]).unwrap();
        assert_eq!(again.as_slice().len(), DIRECT_ALIGNMENT_BYTES);
        assert_eq!(&again.as_slice()[..10], &[7u8; 10]);
        assert!(again.as_slice()[10..].iter().all(|&byte| byte == 0));
        assert_eq!(padded_length(0), 0);
        assert_eq!(padded_length(1), DIRECT_ALIGNMENT_BYTES);
        assert_eq!(
            padded_length(DIRECT_ALIGNMENT_BYTES),
            DIRECT_ALIGNMENT_BYTES
        );
    }

    #[test]
    fn makes_buffers_in_whole_granules_so_nearby_sizes_share_them() {
        assert_eq!(capacity_for(0), BUFFER_GRANULE_BYTES);
        assert_eq!(capacity_for(10), BUFFER_GRANULE_BYTES);
        assert_eq!(capacity_for(1_870_000), 2 * BUFFER_GRANULE_BYTES);
        assert_eq!(capacity_for(1_900_000), capacity_for(1_870_000));
        assert_eq!(
            capacity_for(2 * BUFFER_GRANULE_BYTES),
            2 * BUFFER_GRANULE_BYTES
        );
        assert_eq!(BUFFER_GRANULE_BYTES % DIRECT_ALIGNMENT_BYTES, 0);
    }

    #[test]
    fn copies_several_pieces_one_after_another() {
        let head: Vec<u8> = (0..3000u32).map(|index| (index % 13) as u8 + 1).collect();
        let body: Vec<u8> = (0..6000u32).map(|index| (index % 17) as u8 + 100).collect();
        let buffer = aligned_copy(0, &[&head, &[], &body]).unwrap();
        assert_eq!(buffer.as_slice().len(), 3 * DIRECT_ALIGNMENT_BYTES);
        assert_eq!(&buffer.as_slice()[..3000], &head[..]);
        assert_eq!(&buffer.as_slice()[3000..9000], &body[..]);
        assert!(buffer.as_slice()[9000..].iter().all(|&byte| byte == 0));
        let none = aligned_copy(0, &[]).unwrap();
        assert_eq!(none.as_slice().len(), 0);
    }

    #[test]
    fn keeps_no_more_than_its_bound_of_buffers_and_bytes() {
        // Buffers of 40 MiB: one fits the byte bound, two do not. The pool is shared by the
        // tests, which run at once, so only its bounds are checked, not its exact contents.
        let large = 40 * 1024 * 1024;
        let first = AlignedBuffer::with_capacity(large);
        let second = AlignedBuffer::with_capacity(large);
        release(first);
        release(second);
        let (buffers, bytes) = pooled();
        assert!(buffers <= POOLED_BUFFERS_MAX);
        assert!(bytes <= POOLED_BYTES_MAX, "{bytes} bytes pooled");
        for _ in 0..POOLED_BUFFERS_MAX * 2 {
            release(AlignedBuffer::with_capacity(DIRECT_ALIGNMENT_BYTES));
        }
        let (buffers, bytes) = pooled();
        assert!(buffers <= POOLED_BUFFERS_MAX, "{buffers} buffers pooled");
        assert!(bytes <= POOLED_BYTES_MAX);
    }

    #[test]
    fn refuses_a_position_off_the_alignment() {
        let error = aligned_copy(100, &[b"x"])
            .err()
            .expect("an unaligned position is refused");
        assert!(
            error.message.contains("not a multiple of 4096"),
            "{}",
            error.message
        );
    }

    #[test]
    fn writes_through_a_direct_descriptor_and_reports_errno() {
        let path = temporary_path("write");
        let open = |direct: bool| {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            if direct {
                options.custom_flags(libc::O_DIRECT);
            }
            options.open(&path)
        };
        // A file system without O_DIRECT (an old tmpfs) refuses the flag; the writes are the
        // same through a buffered descriptor.
        let file = open(true).or_else(|_| open(false)).unwrap();
        let first: Vec<u8> = vec![1; DIRECT_ALIGNMENT_BYTES * 2];
        let second = b"the end".to_vec();
        write_at(file.as_raw_fd(), 0, &aligned_copy(0, &[&first]).unwrap()).unwrap();
        let at = first.len() as u64;
        write_at(file.as_raw_fd(), at, &aligned_copy(at, &[&second]).unwrap()).unwrap();
        file.set_len(at + second.len() as u64).unwrap();
        drop(file);
        let written = std::fs::read(&path).unwrap();
        assert_eq!(written.len(), first.len() + second.len());
        assert_eq!(&written[..first.len()], &first[..]);
        assert_eq!(&written[first.len()..], &second[..]);
        std::fs::remove_file(&path).unwrap();

        let error = write_at(-1, 0, &aligned_copy(0, &[b"x"]).unwrap()).unwrap_err();
        assert_eq!(error.errno_name(), Some("EBADF"));
        let full = std::path::Path::new("/dev/full");
        if full.exists() {
            let file = std::fs::OpenOptions::new().write(true).open(full).unwrap();
            let error =
                write_at(file.as_raw_fd(), 0, &aligned_copy(0, &[b"x"]).unwrap()).unwrap_err();
            assert_eq!(error.errno_name(), Some("ENOSPC"));
        }
    }
}
