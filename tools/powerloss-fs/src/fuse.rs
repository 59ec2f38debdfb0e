//! The FUSE side: each kernel request becomes one call on the shared [`State`].
//!
//! Every file is opened with `FOPEN_DIRECT_IO`, so the kernel keeps no page cache of its own:
//! reads and writes all reach the state, and a dropped write can never be read back from a
//! kernel cache. Attributes and entries are not cached either (a zero TTL). Locks (`flock`,
//! `fcntl`) are not implemented here, so the kernel keeps them locally on the mount, which is
//! what a single-machine test needs.

use std::ffi::{CString, OsStr};
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::model::{errno, Body, State};

const TTL: Duration = Duration::ZERO;

pub struct PowerlossFs {
    state: Arc<Mutex<State>>,
    backing: PathBuf,
}

impl PowerlossFs {
    pub fn new(state: Arc<Mutex<State>>, backing: PathBuf) -> Self {
        PowerlossFs { state, backing }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the state unless the power is lost: then every request fails with EIO.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> io::Result<T>) -> Result<T, Errno> {
        let mut state = self.lock();
        if state.dead {
            return Err(Errno::EIO);
        }
        f(&mut state).map_err(|error| match error.raw_os_error() {
            Some(code) if code > 0 => Errno::from_i32(code),
            _ => {
                eprintln!("powerloss-fs: {error}");
                Errno::EIO
            }
        })
    }
}

fn attr(state: &State, ino: u64) -> io::Result<FileAttr> {
    let node = state.node(ino)?;
    let (kind, size, nlink) = match &node.body {
        Body::File(file) => (
            FileType::RegularFile,
            file.overlay.size(),
            u32::from(node.is_linked()),
        ),
        Body::Dir(_) => (FileType::Directory, 4096, 2),
    };
    Ok(FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: node.atime,
        mtime: node.mtime,
        ctime: node.ctime,
        crtime: node.ctime,
        kind,
        perm: node.perm,
        nlink,
        uid: node.uid,
        gid: node.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    })
}

fn time_of(time: TimeOrNow) -> SystemTime {
    match time {
        TimeOrNow::SpecificTime(time) => time,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for PowerlossFs {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> io::Result<()> {
        Ok(())
    }

    /// The session ended without a power loss (a clean unmount): like a real unmount, write
    /// everything out.
    fn destroy(&mut self) {
        let mut state = self.lock();
        if !state.dead {
            if let Err(error) = state.sync_all() {
                eprintln!("powerloss-fs: writing out at unmount failed: {error}");
            }
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.with(|s| {
            let ino = s.lookup(parent.0, name)?;
            attr(s, ino)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(error) => reply.error(error),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|s| attr(s, ino.0)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.with(|s| {
            if let Some(size) = size {
                s.truncate(ino.0, size)?;
            }
            let node = s.node_mut(ino.0)?;
            if let Some(mode) = mode {
                node.perm = (mode & 0o7777) as u16;
            }
            if let Some(uid) = uid {
                node.uid = uid;
            }
            if let Some(gid) = gid {
                node.gid = gid;
            }
            if let Some(atime) = atime {
                node.atime = time_of(atime);
            }
            if let Some(mtime) = mtime {
                node.mtime = time_of(mtime);
            }
            node.ctime = SystemTime::now();
            attr(s, ino.0)
        }) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            reply.error(Errno::EPERM); // only regular files
            return;
        }
        match self.with(|s| {
            let ino = s.create_file(parent.0, name, mode & !umask, req.uid(), req.gid())?;
            attr(s, ino)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(error) => reply.error(error),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.with(|s| {
            let ino = s.mkdir(parent.0, name, mode & !umask, req.uid(), req.gid())?;
            attr(s, ino)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(error) => reply.error(error),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.with(|s| s.remove(parent.0, name, false)) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.with(|s| s.remove(parent.0, name, true)) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.with(|s| s.rename(parent.0, name, newparent.0, newname, flags.bits())) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|s| {
            if s.node(ino.0)?.is_dir() {
                return Err(errno(libc::EISDIR));
            }
            s.open(ino.0)
        }) {
            Ok(handle) => reply.opened(FileHandle(handle), FopenFlags::FOPEN_DIRECT_IO),
            Err(error) => reply.error(error),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.with(|s| s.read(ino.0, offset, size)) {
            Ok(data) => reply.data(&data),
            Err(error) => reply.error(error),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.with(|s| {
            // The kernel places O_APPEND writes at the size it has cached, which is stale after a
            // failed fsync dropped data; like Linux's pwrite on an O_APPEND file, append here.
            let offset = if flags.0 & libc::O_APPEND != 0 {
                s.size(ino.0)?
            } else {
                offset
            };
            s.write(ino.0, offset, data)?;
            if flags.0 & libc::O_DSYNC != 0 {
                s.sync_data(ino.0)?; // O_SYNC and O_DSYNC writes are durable when they return
            }
            Ok(())
        }) {
            Ok(()) => reply.written(data.len() as u32),
            Err(error) => reply.error(error),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() writes nothing back: unsynced data stays unsynced.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.lock().release(ino.0, fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.with(|s| s.fsync_file(ino.0)) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|s| {
            if !s.node(ino.0)?.is_dir() {
                return Err(errno(libc::ENOTDIR));
            }
            s.open(ino.0)
        }) {
            Ok(handle) => reply.opened(FileHandle(handle), FopenFlags::empty()),
            Err(error) => reply.error(error),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.with(|s| s.list(ino.0, fh.0, offset)) {
            Ok(entries) => {
                for (index, (child, is_dir, name)) in entries.into_iter().enumerate() {
                    let kind = if is_dir {
                        FileType::Directory
                    } else {
                        FileType::RegularFile
                    };
                    if reply.add(INodeNo(child), offset + index as u64 + 1, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(error) => reply.error(error),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.lock().release(ino.0, fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.with(|s| s.fsync_dir(ino.0)) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match statvfs(&self.backing) {
            Ok(st) => reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                st.f_files,
                st.f_ffree,
                st.f_bsize as u32,
                st.f_namemax as u32,
                st.f_frsize as u32,
            ),
            Err(error) => reply.error(Errno::from(error)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        match self.with(|s| s.node(ino.0).map(|_| ())) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.with(|s| {
            let ino = match s.lookup(parent.0, name) {
                Ok(existing) => {
                    if flags & libc::O_EXCL != 0 {
                        return Err(errno(libc::EEXIST));
                    }
                    if s.node(existing)?.is_dir() {
                        return Err(errno(libc::EISDIR));
                    }
                    if flags & libc::O_TRUNC != 0 {
                        s.truncate(existing, 0)?;
                    }
                    existing
                }
                Err(error) if error.raw_os_error() == Some(libc::ENOENT) => {
                    s.create_file(parent.0, name, mode & !umask, req.uid(), req.gid())?
                }
                Err(error) => return Err(error),
            };
            let handle = s.open(ino)?;
            Ok((attr(s, ino)?, handle))
        }) {
            Ok((attr, handle)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(handle),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(error) => reply.error(error),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            reply.error(Errno::EOPNOTSUPP); // only plain preallocation: it may grow the size
            return;
        }
        match self.with(|s| {
            let end = offset
                .checked_add(length)
                .ok_or_else(|| errno(libc::EFBIG))?;
            let size = match &s.node(ino.0)?.body {
                Body::File(file) => file.overlay.size(),
                Body::Dir(_) => return Err(errno(libc::EISDIR)),
            };
            if end > size {
                s.truncate(ino.0, end)?;
            }
            Ok(())
        }) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }
}

fn statvfs(path: &std::path::Path) -> io::Result<libc::statvfs> {
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| errno(libc::EINVAL))?;
    let mut out = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `out` is a valid place for the result.
    if unsafe { libc::statvfs(path.as_ptr(), out.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `out`.
    Ok(unsafe { out.assume_init() })
}
