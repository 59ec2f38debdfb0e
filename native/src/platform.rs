//! Platform support that Node.js lacks: an exclusive `flock(2)` on an open descriptor.
//!
//! The engine holds one on its data directory for as long as the store is open. The kernel ties
//! the lock to the open file description, not to a file name or a pid, so it cannot go stale: it
//! goes away when the holder closes the descriptor or dies, however it dies, and deleting or
//! rewriting files in the directory changes nothing. This is platform support rather than a
//! kernel, so it has no TypeScript twin and is not part of the `Kernels` interface.

use std::io;

use crate::durable::{errno_name, os_failure_message};

/// The system call's name, for the `syscall` property of the JS error (as Node would name it).
pub const SYSCALL: &str = "flock";

/// Which `flock(2)` operation failed, so that the message and the JS error can say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOperation {
    LockExclusive,
    Unlock,
}

impl LockOperation {
    /// The call as it was made, for messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            LockOperation::LockExclusive => "flock(LOCK_EX|LOCK_NB)",
            LockOperation::Unlock => "flock(LOCK_UN)",
        }
    }

    const fn flags(self) -> libc::c_int {
        match self {
            LockOperation::LockExclusive => libc::LOCK_EX | libc::LOCK_NB,
            LockOperation::Unlock => libc::LOCK_UN,
        }
    }
}

/// A failed lock or unlock: the operation, and the OS error it returned.
#[derive(Debug)]
pub struct LockError {
    pub operation: LockOperation,
    pub error: io::Error,
}

impl LockError {
    /// The OS error number, when the failure came from the OS.
    pub fn errno(&self) -> Option<i32> {
        self.error.raw_os_error()
    }

    /// The symbolic errno name (for example `EBADF`), when known.
    pub fn errno_name(&self) -> Option<&'static str> {
        self.errno().and_then(errno_name)
    }

    /// A message for people that names the call, the errno and its number, for example
    /// `flock(LOCK_EX|LOCK_NB) failed: EBADF (os error 9): Bad file descriptor`.
    pub fn message(&self) -> String {
        os_failure_message(self.operation.as_str(), &self.error)
    }
}

/// Runs `flock(descriptor, operation)`, retrying when a signal interrupts it.
fn flock(descriptor: i32, operation: LockOperation) -> Result<(), LockError> {
    loop {
        // SAFETY: flock only reads its two integer arguments; a descriptor that is not open
        // (negative ones included) makes it fail with EBADF rather than touch any memory.
        if unsafe { libc::flock(descriptor, operation.flags()) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(LockError { operation, error });
        }
    }
}

/// Takes an exclusive lock on the open descriptor `descriptor` without waiting: `Ok(true)` when
/// this open file description now holds it (or already did), `Ok(false)` when another open file
/// description holds it (in this process or another), and an error for anything else. The
/// descriptor stays open and belongs to the caller; closing it releases the lock.
pub fn lock_exclusive(descriptor: i32) -> Result<bool, LockError> {
    match flock(descriptor, LockOperation::LockExclusive) {
        Ok(()) => Ok(true),
        Err(failure) => {
            let errno = failure.errno();
            // Linux reports a held lock as EWOULDBLOCK, which is EAGAIN there; both are named
            // so that no platform's spelling of "held by someone else" is taken for a failure.
            if errno == Some(libc::EWOULDBLOCK) || errno == Some(libc::EAGAIN) {
                Ok(false)
            } else {
                Err(failure)
            }
        }
    }
}

/// Releases the lock this open file description holds on `descriptor`; a no-op when it holds
/// none. The descriptor stays open.
pub fn unlock(descriptor: i32) -> Result<(), LockError> {
    flock(descriptor, LockOperation::Unlock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    /// A fresh directory for one test, named after the process and the test so that tests running
    /// in parallel never share one.
    fn temporary_directory(name: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!(
            "streamstack-platform-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        directory
    }

    /// Opens `directory` as the engine does: read-only, as a directory. Each call makes a new
    /// open file description, which is what flock locks.
    fn open_directory(directory: &Path) -> i32 {
        let path = CString::new(directory.as_os_str().as_bytes()).unwrap();
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        let descriptor = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        assert!(descriptor >= 0, "{}", io::Error::last_os_error());
        descriptor
    }

    fn close(descriptor: i32) {
        // SAFETY: the descriptor was opened by this test and is closed exactly once.
        assert_eq!(unsafe { libc::close(descriptor) }, 0);
    }

    #[test]
    fn a_second_open_file_description_waits_its_turn() {
        let directory = temporary_directory("turns");
        let first = open_directory(&directory);
        let second = open_directory(&directory);

        assert!(lock_exclusive(first).unwrap());
        assert!(!lock_exclusive(second).unwrap());
        // Locking again through the holder's own description succeeds: it already holds it.
        assert!(lock_exclusive(first).unwrap());
        assert!(!lock_exclusive(second).unwrap());

        unlock(first).unwrap();
        assert!(lock_exclusive(second).unwrap());
        assert!(!lock_exclusive(first).unwrap());
        // Unlocking a description that holds nothing is not an error.
        unlock(first).unwrap();
        assert!(!lock_exclusive(first).unwrap());

        unlock(second).unwrap();
        close(first);
        close(second);
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn closing_the_holder_releases_the_lock() {
        // This is what makes the lock safe when a process dies: the kernel closes its
        // descriptors, and nothing is left behind to be judged stale.
        let directory = temporary_directory("close");
        let holder = open_directory(&directory);
        let waiter = open_directory(&directory);
        assert!(lock_exclusive(holder).unwrap());
        assert!(!lock_exclusive(waiter).unwrap());
        close(holder);
        assert!(lock_exclusive(waiter).unwrap());
        close(waiter);
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn a_bad_descriptor_is_an_error_carrying_ebadf() {
        for result in [lock_exclusive(-1).map(|_| ()), unlock(-1)] {
            let error = result.unwrap_err();
            assert_eq!(error.errno(), Some(libc::EBADF));
            assert_eq!(error.errno_name(), Some("EBADF"));
            assert!(
                error.message().contains("failed: EBADF (os error 9): "),
                "{}",
                error.message()
            );
        }
        let error = lock_exclusive(-1).unwrap_err();
        assert_eq!(error.operation, LockOperation::LockExclusive);
        assert!(error
            .message()
            .starts_with("flock(LOCK_EX|LOCK_NB) failed: "));
        assert_eq!(unlock(-1).unwrap_err().operation, LockOperation::Unlock);
    }
}
