//! Durable writes: bytes written at an offset of an open file, then fdatasync, reporting the
//! errno of whatever failed.

use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::unix::fs::FileExt;
use std::os::unix::io::FromRawFd;

/// Linux's errno for a bad file descriptor, reported for negative descriptors without making a
/// system call (a negative descriptor must never reach `File::from_raw_fd`).
const BAD_FILE_DESCRIPTOR_ERRNO: i32 = 9;

/// Which system call failed, so that the message and the JS error can say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syscall {
    Pwrite,
    Fdatasync,
}

impl Syscall {
    pub const fn as_str(self) -> &'static str {
        match self {
            Syscall::Pwrite => "pwrite",
            Syscall::Fdatasync => "fdatasync",
        }
    }
}

/// A failed durable write: the system call, and the OS error it returned.
#[derive(Debug)]
pub struct DurableWriteError {
    pub syscall: Syscall,
    pub error: io::Error,
}

impl DurableWriteError {
    /// The OS error number, when the failure came from the OS.
    pub fn errno(&self) -> Option<i32> {
        self.error.raw_os_error()
    }

    /// The symbolic errno name (for example `ENOSPC`), when known.
    pub fn errno_name(&self) -> Option<&'static str> {
        self.errno().and_then(errno_name)
    }

    /// A message for people that names the call, the errno and its number, for example
    /// `pwrite failed: ENOSPC (os error 28): No space left on device`.
    pub fn message(&self) -> String {
        os_failure_message(self.syscall.as_str(), &self.error)
    }
}

/// A message for people about a failed system call: the call as made, the errno's name and
/// number, and the OS's description, for example
/// `pwrite failed: ENOSPC (os error 28): No space left on device`.
pub fn os_failure_message(call: &str, error: &io::Error) -> String {
    let description = error.to_string();
    let errno = error.raw_os_error();
    // io::Error's own text ends in "(os error N)"; the errno part below says it already.
    let description = match errno {
        Some(number) => description
            .strip_suffix(&format!(" (os error {number})"))
            .unwrap_or(&description)
            .to_string(),
        None => description,
    };
    match (errno.and_then(errno_name), errno) {
        (Some(name), Some(number)) => {
            format!("{call} failed: {name} (os error {number}): {description}")
        }
        (None, Some(number)) => format!("{call} failed: os error {number}: {description}"),
        _ => format!("{call} failed: {description}"),
    }
}

/// Linux errno names for the errors a write or a sync can return.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        1 => "EPERM",
        2 => "ENOENT",
        4 => "EINTR",
        5 => "EIO",
        6 => "ENXIO",
        9 => "EBADF",
        11 => "EAGAIN",
        12 => "ENOMEM",
        13 => "EACCES",
        14 => "EFAULT",
        16 => "EBUSY",
        19 => "ENODEV",
        21 => "EISDIR",
        22 => "EINVAL",
        27 => "EFBIG",
        28 => "ENOSPC",
        29 => "ESPIPE",
        30 => "EROFS",
        32 => "EPIPE",
        75 => "EOVERFLOW",
        95 => "EOPNOTSUPP",
        110 => "ETIMEDOUT",
        116 => "ESTALE",
        122 => "EDQUOT",
        _ => return None,
    })
}

/// Writes `data` at byte `position` of the open file `descriptor`, looping over short writes and
/// interruptions; no sync. Returns the descriptor as a `File` that never closes it, for a sync
/// to follow. The descriptor stays open: it belongs to the caller.
pub fn write_at(
    descriptor: i32,
    position: u64,
    data: &[u8],
) -> Result<ManuallyDrop<File>, DurableWriteError> {
    if descriptor < 0 {
        return Err(DurableWriteError {
            syscall: Syscall::Pwrite,
            error: io::Error::from_raw_os_error(BAD_FILE_DESCRIPTOR_ERRNO),
        });
    }
    // SAFETY: the descriptor is non-negative; ManuallyDrop keeps the File from closing it, so the
    // caller's ownership is untouched. A descriptor that is not open fails the calls with EBADF.
    let file = ManuallyDrop::new(unsafe { File::from_raw_fd(descriptor) });
    file.write_all_at(data, position)
        .map_err(|error| DurableWriteError {
            syscall: Syscall::Pwrite,
            error,
        })?;
    Ok(file)
}

/// Writes `pieces` one after another from byte `position` of the open file `descriptor` (looping
/// over short writes and interruptions), then fdatasyncs it. The descriptor stays open: it
/// belongs to the caller.
pub fn write_durable(
    descriptor: i32,
    position: u64,
    pieces: &[&[u8]],
) -> Result<(), DurableWriteError> {
    // An empty first write checks the descriptor, so a call with no bytes still syncs through it.
    let file = write_at(descriptor, position, &[])?;
    let mut at = position;
    for piece in pieces {
        file.write_all_at(piece, at)
            .map_err(|error| DurableWriteError {
                syscall: Syscall::Pwrite,
                error,
            })?;
        at += piece.len() as u64;
    }
    file.sync_data().map_err(|error| DurableWriteError {
        syscall: Syscall::Fdatasync,
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::io::AsRawFd;

    fn temporary_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("streamstack-durable-{}-{name}", std::process::id()))
    }

    #[test]
    fn writes_at_the_offset_and_leaves_the_descriptor_open() {
        let path = temporary_path("write");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        write_durable(file.as_raw_fd(), 0, &[b"hello world"]).unwrap();
        write_durable(file.as_raw_fd(), 6, &[b"th", b"", b"ere"]).unwrap();
        write_durable(file.as_raw_fd(), 11, &[]).unwrap();
        // The descriptor is still usable after the calls, so it was not closed.
        let mut content = String::new();
        (&file).read_to_string(&mut content).unwrap();
        assert_eq!(content, "hello there");
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn reports_the_errno_of_a_failed_call() {
        let error = write_durable(-1, 0, &[b"x"]).unwrap_err();
        assert_eq!(error.syscall, Syscall::Pwrite);
        assert_eq!(error.errno(), Some(9));
        assert_eq!(error.errno_name(), Some("EBADF"));
        assert!(
            error
                .message()
                .starts_with("pwrite failed: EBADF (os error 9): "),
            "{}",
            error.message()
        );

        // A descriptor opened read-only cannot be written.
        let path = temporary_path("read-only");
        std::fs::write(&path, b"").unwrap();
        let file = File::open(&path).unwrap();
        let error = write_durable(file.as_raw_fd(), 0, &[b"x"]).unwrap_err();
        assert_eq!(error.errno_name(), Some("EBADF"));
        drop(file);
        std::fs::remove_file(&path).unwrap();

        let full = std::path::Path::new("/dev/full");
        if full.exists() {
            let file = std::fs::OpenOptions::new().write(true).open(full).unwrap();
            let error = write_durable(file.as_raw_fd(), 0, &[b"x"]).unwrap_err();
            assert_eq!(error.errno_name(), Some("ENOSPC"));
            assert!(error.message().contains("ENOSPC (os error 28)"));
        }
    }
}
