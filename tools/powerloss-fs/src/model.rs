//! The file system's state: a volatile tree (what the mount shows) over a durable tree (what the
//! backing directory holds), and the rules that move changes from the first to the second.
//!
//! - A file's data and size become durable when the file is fsync'd or fdatasync'd.
//! - A directory entry (create, mkdir, unlink, rmdir, rename) becomes durable when the directory
//!   holding it is fsync'd. A rename is one operation: fsyncing either its source or its target
//!   directory makes the whole rename durable (as a journal would), never half of it.
//! - Fsyncing a directory also makes its own path durable: its name and its ancestors' names
//!   (a pending mkdir or rename of any of them), as a journaling file system would. Likewise a
//!   name made durable in a directory brings along that directory's path.
//!
//! The backing directory is kept equal to the durable tree at all times, so after a power loss
//! it is exactly what survived. The durable content of a file that has no durable name yet lives
//! in an anonymous file (`O_TMPFILE`), which vanishes with the process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::pages::{Content, Overlay, Rng};

pub const ROOT: u64 = 1;

pub fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// Where a node's durable name is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DurableLink {
    /// None: the node has no durable name (new, or durably removed).
    Gone,
    /// The root of the backing directory.
    Root,
    /// An entry of a durable directory.
    At(u64, OsString),
    /// Moved aside in the backing directory while one directory fsync is being applied.
    Limbo(PathBuf),
}

pub struct FileNode {
    pub overlay: Overlay,
    /// The durable content: the backing file, or an anonymous file while it has no durable name.
    /// Opened lazily for files found in the backing directory.
    durable: Option<File>,
    /// The durable file was made with `O_TMPFILE`, so it can be given a name without a copy.
    linkable: bool,
}

pub struct DirNode {
    /// The volatile entries; None until listed from the backing directory (then equal to it).
    entries: Option<BTreeMap<OsString, u64>>,
    /// The durable entries (meaningful once `entries` is loaded).
    durable: BTreeMap<OsString, u64>,
}

pub enum Body {
    File(FileNode),
    Dir(DirNode),
}

pub struct Node {
    pub body: Body,
    /// The volatile name: parent and entry name; None for the root and for removed nodes.
    link: Option<(u64, OsString)>,
    durable_link: DurableLink,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    /// Open handles (files and directories).
    pub opens: u32,
}

impl Node {
    pub fn is_dir(&self) -> bool {
        matches!(self.body, Body::Dir(_))
    }

    pub fn is_linked(&self) -> bool {
        self.link.is_some()
    }
}

/// Reads and writes of a file's durable content (none yet: empty).
struct Durable<'a>(Option<&'a File>);

impl Content for Durable<'_> {
    fn read_exact_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<()> {
        match self.0 {
            Some(file) => FileExt::read_exact_at(file, buffer, offset),
            None => Err(errno(libc::EIO)),
        }
    }
    fn write_all_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        match self.0 {
            Some(file) => FileExt::write_all_at(file, data, offset),
            None => Err(errno(libc::EIO)),
        }
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        match self.0 {
            Some(file) => file.set_len(len),
            None => Err(errno(libc::EIO)),
        }
    }
}

#[derive(Default, Debug, Clone)]
pub struct Counters {
    pub writes: u64,
    pub bytes_written: u64,
    pub fsyncs: u64,
    pub fsyncdirs: u64,
    pub failed_fsyncs: u64,
}

/// What a power loss let through.
#[derive(Default, Debug)]
pub struct LossReport {
    pub torn_pages_written: usize,
    pub dropped_pages: usize,
    pub dropped_names: usize,
}

/// One directory fsync being applied.
#[derive(Default)]
struct Batch {
    in_progress: HashSet<u64>,
    limbo: Vec<u64>,
}

pub struct State {
    backing: PathBuf,
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    next_handle: u64,
    next_limbo: u64,
    /// Directory listings taken by opendir/readdir, by handle.
    listings: HashMap<u64, Vec<(u64, bool, OsString)>>,
    /// Set by a power loss: from then on every operation fails and nothing touches the backing.
    pub dead: bool,
    pub counters: Counters,
    /// The value of `counters.fsyncs` at which an fsync fails with EIO.
    fail_fsync_at: Option<u64>,
    pub seed: u64,
}

fn times(meta: &fs::Metadata) -> (SystemTime, SystemTime, SystemTime) {
    let at = |secs: i64, nanos: i64| {
        if secs >= 0 {
            UNIX_EPOCH + Duration::new(secs as u64, nanos as u32)
        } else {
            UNIX_EPOCH
        }
    };
    (
        at(meta.atime(), meta.atime_nsec()),
        at(meta.mtime(), meta.mtime_nsec()),
        at(meta.ctime(), meta.ctime_nsec()),
    )
}

fn path_cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| errno(libc::EINVAL))
}

fn ignore_missing(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl State {
    pub fn new(backing: PathBuf, seed: u64) -> io::Result<State> {
        let meta = fs::metadata(&backing)?;
        if !meta.is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        let (atime, mtime, ctime) = times(&meta);
        let root = Node {
            body: Body::Dir(DirNode {
                entries: None,
                durable: BTreeMap::new(),
            }),
            link: None,
            durable_link: DurableLink::Root,
            perm: (meta.mode() & 0o7777) as u16,
            uid: meta.uid(),
            gid: meta.gid(),
            atime,
            mtime,
            ctime,
            opens: 0,
        };
        Ok(State {
            backing,
            nodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            next_handle: 1,
            next_limbo: 0,
            listings: HashMap::new(),
            dead: false,
            counters: Counters::default(),
            fail_fsync_at: None,
            seed,
        })
    }

    // ---- lookups -------------------------------------------------------------------------

    pub fn node(&self, ino: u64) -> io::Result<&Node> {
        self.nodes.get(&ino).ok_or_else(|| errno(libc::ENOENT))
    }

    pub fn node_mut(&mut self, ino: u64) -> io::Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or_else(|| errno(libc::ENOENT))
    }

    fn file_mut(&mut self, ino: u64) -> io::Result<&mut FileNode> {
        match &mut self.node_mut(ino)?.body {
            Body::File(file) => Ok(file),
            Body::Dir(_) => Err(errno(libc::EISDIR)),
        }
    }

    fn dir(&self, ino: u64) -> io::Result<&DirNode> {
        match &self.node(ino)?.body {
            Body::Dir(dir) => Ok(dir),
            Body::File(_) => Err(errno(libc::ENOTDIR)),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> io::Result<&mut DirNode> {
        match &mut self.node_mut(ino)?.body {
            Body::Dir(dir) => Ok(dir),
            Body::File(_) => Err(errno(libc::ENOTDIR)),
        }
    }

    /// The volatile entries of directory `ino`, listed from the backing directory on first use.
    fn entries(&mut self, ino: u64) -> io::Result<&mut BTreeMap<OsString, u64>> {
        self.load_dir(ino)?;
        Ok(self.dir_mut(ino)?.entries.as_mut().expect("loaded"))
    }

    fn load_dir(&mut self, ino: u64) -> io::Result<()> {
        if self.dir(ino)?.entries.is_some() {
            return Ok(());
        }
        let path = self.durable_path(ino).ok_or_else(|| errno(libc::EIO))?;
        let mut listed = BTreeMap::new();
        for entry in fs::read_dir(&path)? {
            let entry = entry?;
            let name = entry.file_name();
            let meta = entry.metadata()?;
            let body = if meta.is_dir() {
                Body::Dir(DirNode {
                    entries: None,
                    durable: BTreeMap::new(),
                })
            } else if meta.is_file() {
                Body::File(FileNode {
                    overlay: Overlay::new(meta.len()),
                    durable: None,
                    linkable: false,
                })
            } else {
                continue; // symlinks, devices, sockets: not shown
            };
            let (atime, mtime, ctime) = times(&meta);
            let child = self.next_ino;
            self.next_ino += 1;
            self.nodes.insert(
                child,
                Node {
                    body,
                    link: Some((ino, name.clone())),
                    durable_link: DurableLink::At(ino, name.clone()),
                    perm: (meta.mode() & 0o7777) as u16,
                    uid: meta.uid(),
                    gid: meta.gid(),
                    atime,
                    mtime,
                    ctime,
                    opens: 0,
                },
            );
            listed.insert(name, child);
        }
        let dir = self.dir_mut(ino)?;
        dir.durable = listed.clone();
        dir.entries = Some(listed);
        Ok(())
    }

    pub fn lookup(&mut self, parent: u64, name: &OsStr) -> io::Result<u64> {
        self.entries(parent)?
            .get(name)
            .copied()
            .ok_or_else(|| errno(libc::ENOENT))
    }

    /// The path of a node's durable name in the backing directory, if it has one.
    fn durable_path(&self, ino: u64) -> Option<PathBuf> {
        match &self.nodes.get(&ino)?.durable_link {
            DurableLink::Gone => None,
            DurableLink::Root => Some(self.backing.clone()),
            DurableLink::At(parent, name) => Some(self.durable_path(*parent)?.join(name)),
            DurableLink::Limbo(path) => Some(path.clone()),
        }
    }

    fn is_durable(&self, ino: u64) -> bool {
        self.nodes
            .get(&ino)
            .is_some_and(|node| node.durable_link != DurableLink::Gone)
    }

    /// Whether a node's durable name is its volatile name.
    fn is_settled(&self, ino: u64) -> bool {
        ino == ROOT
            || self
                .nodes
                .get(&ino)
                .is_some_and(|node| match (&node.link, &node.durable_link) {
                    (Some((parent, name)), DurableLink::At(durable_parent, durable_name)) => {
                        parent == durable_parent && name == durable_name
                    }
                    _ => false,
                })
    }

    /// A directory that can still get entries: the root, or one with a volatile name.
    fn check_live_dir(&self, ino: u64) -> io::Result<()> {
        let node = self.node(ino)?;
        if !node.is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        if ino != ROOT && node.link.is_none() {
            return Err(errno(libc::ENOENT));
        }
        Ok(())
    }

    // ---- volatile operations ---------------------------------------------------------------

    fn add_node(
        &mut self,
        parent: u64,
        name: &OsStr,
        body: Body,
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<u64> {
        if name.len() > 255 {
            return Err(errno(libc::ENAMETOOLONG));
        }
        self.check_live_dir(parent)?;
        if self.entries(parent)?.contains_key(name) {
            return Err(errno(libc::EEXIST));
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let now = SystemTime::now();
        self.nodes.insert(
            ino,
            Node {
                body,
                link: Some((parent, name.to_owned())),
                durable_link: DurableLink::Gone,
                perm: (perm & 0o7777) as u16,
                uid,
                gid,
                atime: now,
                mtime: now,
                ctime: now,
                opens: 0,
            },
        );
        self.entries(parent)?.insert(name.to_owned(), ino);
        self.touch(parent);
        Ok(ino)
    }

    fn touch(&mut self, ino: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            let now = SystemTime::now();
            node.mtime = now;
            node.ctime = now;
        }
    }

    pub fn create_file(
        &mut self,
        parent: u64,
        name: &OsStr,
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<u64> {
        let body = Body::File(FileNode {
            overlay: Overlay::new(0),
            durable: None,
            linkable: false,
        });
        self.add_node(parent, name, body, perm, uid, gid)
    }

    pub fn mkdir(
        &mut self,
        parent: u64,
        name: &OsStr,
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<u64> {
        let body = Body::Dir(DirNode {
            entries: Some(BTreeMap::new()),
            durable: BTreeMap::new(),
        });
        self.add_node(parent, name, body, perm, uid, gid)
    }

    /// Removes a name (unlink when `dir` is false, rmdir when true).
    pub fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> io::Result<()> {
        let ino = self.lookup(parent, name)?;
        match (dir, self.node(ino)?.is_dir()) {
            (false, true) => return Err(errno(libc::EISDIR)),
            (true, false) => return Err(errno(libc::ENOTDIR)),
            (true, true) if !self.entries(ino)?.is_empty() => return Err(errno(libc::ENOTEMPTY)),
            _ => {}
        }
        self.entries(parent)?.remove(name);
        self.unlinked(ino);
        self.touch(parent);
        Ok(())
    }

    /// A node lost its volatile name.
    fn unlinked(&mut self, ino: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.link = None;
            node.ctime = SystemTime::now();
        }
        self.release_if_unused(ino);
    }

    /// Frees what an unreachable node holds: nobody can read or sync it again.
    fn release_if_unused(&mut self, ino: u64) {
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        if ino == ROOT || node.link.is_some() || node.opens > 0 {
            return;
        }
        if let Body::File(file) = &mut node.body {
            file.overlay.discard();
        }
        if node.durable_link == DurableLink::Gone {
            self.nodes.remove(&ino);
        }
    }

    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: u32,
    ) -> io::Result<()> {
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return Err(errno(libc::EINVAL)); // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported
        }
        if new_name.len() > 255 {
            return Err(errno(libc::ENAMETOOLONG));
        }
        let ino = self.lookup(parent, name)?;
        self.check_live_dir(new_parent)?;
        let existing = self.entries(new_parent)?.get(new_name).copied();
        if existing == Some(ino) {
            return Ok(());
        }
        if existing.is_some() && flags & libc::RENAME_NOREPLACE != 0 {
            return Err(errno(libc::EEXIST));
        }
        let moving_dir = self.node(ino)?.is_dir();
        if moving_dir {
            // A directory cannot move into itself or below itself.
            let mut at = Some(new_parent);
            while let Some(current) = at {
                if current == ino {
                    return Err(errno(libc::EINVAL));
                }
                at = self.node(current)?.link.as_ref().map(|(up, _)| *up);
            }
        }
        if let Some(replaced) = existing {
            match (moving_dir, self.node(replaced)?.is_dir()) {
                (false, true) => return Err(errno(libc::EISDIR)),
                (true, false) => return Err(errno(libc::ENOTDIR)),
                (true, true) if !self.entries(replaced)?.is_empty() => {
                    return Err(errno(libc::ENOTEMPTY))
                }
                _ => {}
            }
        }
        self.entries(parent)?.remove(name);
        self.entries(new_parent)?.insert(new_name.to_owned(), ino);
        let node = self.node_mut(ino)?;
        node.link = Some((new_parent, new_name.to_owned()));
        node.ctime = SystemTime::now();
        if let Some(replaced) = existing {
            self.unlinked(replaced);
        }
        self.touch(parent);
        self.touch(new_parent);
        Ok(())
    }

    pub fn open(&mut self, ino: u64) -> io::Result<u64> {
        self.node_mut(ino)?.opens += 1;
        let handle = self.next_handle;
        self.next_handle += 1;
        Ok(handle)
    }

    pub fn release(&mut self, ino: u64, handle: u64) {
        self.listings.remove(&handle);
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.opens = node.opens.saturating_sub(1);
        }
        self.release_if_unused(ino);
    }

    /// The entries of directory `ino` from `offset` on ("." and ".." first); a listing is taken
    /// when a read starts at offset 0 and served from for the rest of the handle's reads.
    pub fn list(
        &mut self,
        ino: u64,
        handle: u64,
        offset: u64,
    ) -> io::Result<Vec<(u64, bool, OsString)>> {
        if offset == 0 || !self.listings.contains_key(&handle) {
            let up = self.node(ino)?.link.as_ref().map_or(ROOT, |(up, _)| *up);
            let mut listing = vec![
                (ino, true, OsString::from(".")),
                (up, true, OsString::from("..")),
            ];
            let children: Vec<(OsString, u64)> = self
                .entries(ino)?
                .iter()
                .map(|(n, i)| (n.clone(), *i))
                .collect();
            for (name, child) in children {
                listing.push((child, self.node(child)?.is_dir(), name));
            }
            self.listings.insert(handle, listing);
        }
        Ok(self.listings[&handle]
            .iter()
            .skip(offset as usize)
            .cloned()
            .collect())
    }

    // ---- data ------------------------------------------------------------------------------

    /// Opens the durable content of a file found in the backing directory, if not open yet.
    fn open_durable(&mut self, ino: u64) -> io::Result<()> {
        let path = self.durable_path(ino);
        let file = self.file_mut(ino)?;
        if file.durable.is_some() || !file.overlay.reads_durable() && path.is_none() {
            return Ok(());
        }
        let path = path.ok_or_else(|| errno(libc::EIO))?;
        file.durable = Some(OpenOptions::new().read(true).write(true).open(path)?);
        Ok(())
    }

    pub fn read(&mut self, ino: u64, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        self.open_durable(ino)?;
        let file = self.file_mut(ino)?;
        file.overlay
            .read(offset, size, &Durable(file.durable.as_ref()))
    }

    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        self.open_durable(ino)?;
        let file = self.file_mut(ino)?;
        file.overlay
            .write(offset, data, &Durable(file.durable.as_ref()))?;
        self.counters.writes += 1;
        self.counters.bytes_written += data.len() as u64;
        self.touch(ino);
        Ok(())
    }

    pub fn size(&mut self, ino: u64) -> io::Result<u64> {
        Ok(self.file_mut(ino)?.overlay.size())
    }

    /// Makes a file's data durable outside an fsync (an O_SYNC write): never made to fail.
    pub fn sync_data(&mut self, ino: u64) -> io::Result<()> {
        self.sync_file_data(ino)
    }

    pub fn truncate(&mut self, ino: u64, size: u64) -> io::Result<()> {
        self.file_mut(ino)?.overlay.truncate(size);
        self.touch(ino);
        Ok(())
    }

    /// Arms a failure: the `n`th file fsync from now (1 = the next) fails with EIO.
    pub fn fail_fsync(&mut self, n: u64) {
        self.fail_fsync_at = Some(self.counters.fsyncs + n);
    }

    /// fsync/fdatasync of a file: its data and size become durable (not its name).
    pub fn fsync_file(&mut self, ino: u64) -> io::Result<()> {
        self.counters.fsyncs += 1;
        if self.fail_fsync_at == Some(self.counters.fsyncs) {
            self.fail_fsync_at = None;
            self.counters.failed_fsyncs += 1;
            // As Linux does after a failed writeback: the unsynced data is gone.
            self.file_mut(ino)?.overlay.discard();
            return Err(errno(libc::EIO));
        }
        self.sync_file_data(ino)
    }

    fn sync_file_data(&mut self, ino: u64) -> io::Result<()> {
        if !self.file_mut(ino)?.overlay.is_dirty() {
            return Ok(());
        }
        self.open_durable(ino)?;
        let backing = self.backing.clone();
        let perm = self.node(ino)?.perm;
        let file = self.file_mut(ino)?;
        if file.durable.is_none() {
            let (anonymous, linkable) = anonymous_file(&backing)?;
            file.durable = Some(anonymous);
            file.linkable = linkable;
        }
        let durable = file.durable.as_ref().expect("opened above");
        file.overlay.apply(&mut Durable(Some(durable)))?;
        durable.set_permissions(fs::Permissions::from_mode(u32::from(perm)))?;
        Ok(())
    }

    // ---- names -----------------------------------------------------------------------------

    /// fsync of a directory: its entries become durable (see the module's rules).
    pub fn fsync_dir(&mut self, ino: u64) -> io::Result<()> {
        self.counters.fsyncdirs += 1;
        self.sync_dir(ino)
    }

    fn entry_differences(&self, ino: u64) -> io::Result<Vec<(Option<u64>, Option<u64>)>> {
        let dir = self.dir(ino)?;
        let entries = dir.entries.as_ref().expect("loaded");
        let mut differences = Vec::new();
        for (name, &child) in entries {
            let durable = dir.durable.get(name).copied();
            if durable != Some(child) {
                differences.push((Some(child), durable));
            }
        }
        for (name, &child) in &dir.durable {
            if !entries.contains_key(name) {
                differences.push((None, Some(child)));
            }
        }
        Ok(differences)
    }

    fn sync_dir(&mut self, ino: u64) -> io::Result<()> {
        self.load_dir(ino)?;
        let mut batch = Batch::default();
        let result = self.sync_dir_entries(ino, &mut batch);
        let finished = self.finish_batch(batch);
        result.and(finished)
    }

    fn sync_dir_entries(&mut self, ino: u64, batch: &mut Batch) -> io::Result<()> {
        self.settle_path(ino, batch)?;
        for _ in 0..64 {
            let differences = self.entry_differences(ino)?;
            if differences.is_empty() {
                return Ok(());
            }
            batch.in_progress.clear();
            for (volatile, durable) in differences {
                if let Some(child) = volatile {
                    self.sync_link(child, batch)?;
                }
                if let Some(child) = durable {
                    self.sync_link(child, batch)?;
                }
            }
        }
        Err(io::Error::other("directory entries did not settle"))
    }

    /// Makes the durable path of directory `ino` its volatile path: the pending names (mkdir,
    /// rename) of it and its ancestors become durable, top down.
    fn settle_path(&mut self, ino: u64, batch: &mut Batch) -> io::Result<()> {
        let mut path = vec![ino];
        while let Some((parent, _)) = self.node(*path.last().expect("not empty"))?.link.as_ref() {
            path.push(*parent);
        }
        for &dir in path.iter().rev() {
            if !self.is_settled(dir) {
                self.sync_link(dir, batch)?;
            }
        }
        Ok(())
    }

    /// Makes node `ino`'s durable name what its volatile name is: moves it, gives it a first
    /// durable name, or removes it, in the backing directory and in the durable tree.
    fn sync_link(&mut self, ino: u64, batch: &mut Batch) -> io::Result<()> {
        if ino == ROOT || !batch.in_progress.insert(ino) {
            return Ok(());
        }
        let Some(node) = self.nodes.get(&ino) else {
            return Ok(());
        };
        let target = node.link.clone();
        let current = node.durable_link.clone();
        match target {
            Some((parent, name)) => {
                if current == DurableLink::At(parent, name.clone()) {
                    return Ok(());
                }
                // The parent's path is settled first (a journal would have it before); this also
                // keeps a directory from moving into its own durable subtree.
                self.settle_path(parent, batch)?;
                if !self.is_durable(parent) {
                    return Err(io::Error::other(
                        "a parent directory could not be made durable",
                    ));
                }
                let parent_path = self.durable_path(parent).ok_or_else(|| errno(libc::EIO))?;
                let destination = parent_path.join(&name);
                // Whatever holds the name durably now is moved aside; it is settled later.
                if let Some(occupant) = self.dir(parent)?.durable.get(&name).copied() {
                    self.move_to_limbo(occupant)?;
                    batch.limbo.push(occupant);
                }
                match current {
                    DurableLink::Gone => self.materialize(ino, &destination)?,
                    _ => {
                        let source = self.durable_path(ino).ok_or_else(|| errno(libc::EIO))?;
                        fs::rename(&source, &destination)?;
                        self.drop_durable_entry(ino)?;
                    }
                }
                self.dir_mut(parent)?.durable.insert(name.clone(), ino);
                self.node_mut(ino)?.durable_link = DurableLink::At(parent, name);
            }
            None => {
                if current == DurableLink::Gone {
                    return Ok(());
                }
                if self.node(ino)?.is_dir() {
                    // Entries that were renamed out of the removed directory go first.
                    self.load_dir(ino)?;
                    let children: Vec<u64> = self.dir(ino)?.durable.values().copied().collect();
                    for child in children {
                        self.sync_link(child, batch)?;
                    }
                }
                self.remove_durable(ino)?;
            }
        }
        Ok(())
    }

    /// Removes node `ino`'s durable entry from its durable parent (not from the backing).
    fn drop_durable_entry(&mut self, ino: u64) -> io::Result<()> {
        if let DurableLink::At(parent, name) = self.node(ino)?.durable_link.clone() {
            let dir = self.dir_mut(parent)?;
            if dir.durable.get(&name) == Some(&ino) {
                dir.durable.remove(&name);
            }
        }
        Ok(())
    }

    fn move_to_limbo(&mut self, ino: u64) -> io::Result<()> {
        let source = self.durable_path(ino).ok_or_else(|| errno(libc::EIO))?;
        let limbo = self.backing.join(format!(
            ".powerloss-fs-limbo-{}-{}",
            std::process::id(),
            self.next_limbo
        ));
        self.next_limbo += 1;
        fs::rename(&source, &limbo)?;
        self.drop_durable_entry(ino)?;
        self.node_mut(ino)?.durable_link = DurableLink::Limbo(limbo);
        Ok(())
    }

    /// Removes node `ino` (and, for a directory, what is durably below it) from the backing.
    fn remove_durable(&mut self, ino: u64) -> io::Result<()> {
        let Some(path) = self.durable_path(ino) else {
            return Ok(());
        };
        self.forget_durable(ino)?;
        if self.node(ino).is_ok_and(|node| node.is_dir()) {
            ignore_missing(fs::remove_dir_all(&path))?;
        } else {
            ignore_missing(fs::remove_file(&path))?;
        }
        self.drop_durable_entry(ino)?;
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.durable_link = DurableLink::Gone;
        }
        self.release_if_unused(ino);
        Ok(())
    }

    /// Before a durable subtree goes: files still in use keep their durable content open, and the
    /// nodes below forget their durable names.
    fn forget_durable(&mut self, ino: u64) -> io::Result<()> {
        let node = self.node(ino)?;
        let in_use = node.opens > 0 || node.link.is_some();
        if node.is_dir() {
            let children: Vec<u64> = match &self.dir(ino)?.entries {
                Some(_) => self.dir(ino)?.durable.values().copied().collect(),
                None => Vec::new(),
            };
            for child in children {
                self.forget_durable(child)?;
                if let Some(node) = self.nodes.get_mut(&child) {
                    node.durable_link = DurableLink::Gone;
                }
                self.release_if_unused(child);
            }
            self.dir_mut(ino)?.durable.clear();
            if !in_use {
                // A directory never listed has nothing volatile either.
                self.dir_mut(ino)?.entries.get_or_insert_with(BTreeMap::new);
            }
        } else if in_use {
            self.open_durable(ino)?;
        }
        Ok(())
    }

    /// Gives a node with no durable name its first one at `destination`.
    fn materialize(&mut self, ino: u64, destination: &Path) -> io::Result<()> {
        let perm = u32::from(self.node(ino)?.perm);
        match &mut self.node_mut(ino)?.body {
            Body::Dir(_) => fs::DirBuilder::new().mode(perm).create(destination),
            Body::File(file) => {
                if let Some(durable) = &file.durable {
                    if file.linkable && link_anonymous(durable, destination).is_ok() {
                        file.linkable = false;
                        return durable.set_permissions(fs::Permissions::from_mode(perm));
                    }
                }
                let named = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(perm)
                    .open(destination)?;
                if let Some(durable) = &file.durable {
                    copy_content(durable, &named, file.overlay.durable_size())?;
                }
                named.set_len(file.overlay.durable_size())?;
                named.set_permissions(fs::Permissions::from_mode(perm))?;
                file.durable = Some(named);
                file.linkable = false;
                Ok(())
            }
        }
    }

    /// Settles what was moved aside: each goes to its volatile name, or is removed.
    fn finish_batch(&mut self, batch: Batch) -> io::Result<()> {
        let mut result = Ok(());
        for ino in batch.limbo {
            let in_limbo = |state: &State| {
                state
                    .nodes
                    .get(&ino)
                    .is_some_and(|node| matches!(node.durable_link, DurableLink::Limbo(_)))
            };
            if !in_limbo(self) {
                continue;
            }
            let mut again = Batch::default();
            if let Err(error) = self.sync_link(ino, &mut again) {
                result = result.and(Err(error));
            }
            if in_limbo(self) {
                if let Err(error) = self.remove_durable(ino) {
                    result = result.and(Err(error));
                }
            }
            if !again.limbo.is_empty() {
                result = result.and(self.finish_batch(again));
            }
        }
        result
    }

    // ---- whole-system operations -----------------------------------------------------------

    /// Makes everything durable, as sync(1) or a clean unmount would.
    pub fn sync_all(&mut self) -> io::Result<()> {
        let mut files: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, node)| {
                node.link.is_some() && matches!(&node.body, Body::File(f) if f.overlay.is_dirty())
            })
            .map(|(ino, _)| *ino)
            .collect();
        files.sort_unstable();
        for ino in files {
            self.sync_file_data(ino)?;
        }
        let mut dirs: Vec<(usize, u64)> = self
            .nodes
            .iter()
            .filter(|(ino, node)| {
                (**ino == ROOT || node.link.is_some())
                    && matches!(&node.body, Body::Dir(d) if d.entries.is_some())
            })
            .map(|(ino, _)| (self.depth(*ino), *ino))
            .collect();
        dirs.sort_unstable();
        for (_, ino) in dirs {
            if self
                .nodes
                .get(&ino)
                .is_some_and(|node| ino == ROOT || node.link.is_some())
            {
                self.sync_dir(ino)?;
            }
        }
        Ok(())
    }

    fn depth(&self, ino: u64) -> usize {
        let mut depth = 0;
        let mut at = ino;
        while let Some((up, _)) = self.nodes.get(&at).and_then(|node| node.link.as_ref()) {
            depth += 1;
            at = *up;
        }
        depth
    }

    /// Power loss: nothing more reaches the backing directory, except (torn) a seeded random
    /// half of the unsynced pages of files that have a durable name.
    pub fn lose_power(&mut self, torn: bool) -> io::Result<LossReport> {
        self.dead = true;
        let mut report = LossReport::default();
        let mut rng = Rng::new(self.seed);
        let mut inos: Vec<u64> = self.nodes.keys().copied().collect();
        inos.sort_unstable();
        for ino in inos.iter().copied() {
            if let Body::Dir(_) = self.node(ino)?.body {
                report.dropped_names += self.entry_differences_if_loaded(ino);
                continue;
            }
            let named = matches!(
                self.node(ino)?.durable_link,
                DurableLink::At(..) | DurableLink::Root
            );
            let pages = match &self.node(ino)?.body {
                Body::File(file) => file.overlay.dirty_pages(),
                Body::Dir(_) => 0,
            };
            if !torn || !named || pages == 0 {
                report.dropped_pages += pages;
                continue;
            }
            let mut written = 0;
            let outcome = self.open_durable(ino).and_then(|()| {
                let file = self.file_mut(ino)?;
                let durable = file.durable.as_ref().ok_or_else(|| errno(libc::EIO))?;
                file.overlay
                    .write_torn(&mut Durable(Some(durable)), &mut || {
                        let keep = rng.coin();
                        written += usize::from(keep);
                        keep
                    })
            });
            if let Err(error) = outcome {
                eprintln!("powerloss-fs: torn write to node {ino} failed: {error}");
            }
            report.torn_pages_written += written;
            report.dropped_pages += pages - written;
        }
        Ok(report)
    }

    fn entry_differences_if_loaded(&self, ino: u64) -> usize {
        match self.dir(ino) {
            Ok(dir) if dir.entries.is_some() => self.entry_differences(ino).map_or(0, |d| d.len()),
            _ => 0,
        }
    }

    /// Counts for the `stats` command, as one JSON object.
    pub fn stats_json(&self) -> String {
        let mut dirty_files = 0;
        let mut dirty_pages = 0;
        let mut pending_names = 0;
        for (ino, node) in &self.nodes {
            match &node.body {
                Body::File(file) => {
                    if file.overlay.is_dirty() && node.link.is_some() {
                        dirty_files += 1;
                        dirty_pages += file.overlay.dirty_pages();
                    }
                }
                Body::Dir(_) => pending_names += self.entry_differences_if_loaded(*ino),
            }
        }
        let c = &self.counters;
        format!(
            "{{\"seed\":{},\"nodes\":{},\"dirty_files\":{},\"dirty_pages\":{},\"pending_names\":{},\
             \"writes\":{},\"bytes_written\":{},\"fsyncs\":{},\"fsyncdirs\":{},\"failed_fsyncs\":{},\
             \"fail_fsync_armed\":{}}}",
            self.seed,
            self.nodes.len(),
            dirty_files,
            dirty_pages,
            pending_names,
            c.writes,
            c.bytes_written,
            c.fsyncs,
            c.fsyncdirs,
            c.failed_fsyncs,
            self.fail_fsync_at.map_or(0, |at| at - c.fsyncs),
        )
    }
}

/// A file with no name for durable content that has none yet: `O_TMPFILE` where the backing
/// file system has it (it can be linked later), else a file created and unlinked at once.
fn anonymous_file(directory: &Path) -> io::Result<(File, bool)> {
    let tmpfile = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(directory);
    if let Ok(file) = tmpfile {
        return Ok((file, true));
    }
    for attempt in 0..100u32 {
        let path = directory.join(format!(
            ".powerloss-fs-anon-{}-{attempt}",
            std::process::id()
        ));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => {
                fs::remove_file(&path)?;
                return Ok((file, false));
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    Err(errno(libc::EEXIST))
}

/// Gives an `O_TMPFILE` file the name `destination`.
fn link_anonymous(file: &File, destination: &Path) -> io::Result<()> {
    let source = path_cstring(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))?;
    let target = path_cstring(destination)?;
    // SAFETY: both arguments are valid NUL-terminated strings that outlive the call.
    let result = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            source.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn copy_content(from: &File, to: &File, len: u64) -> io::Result<()> {
    let mut buffer = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let chunk = (len - at).min(buffer.len() as u64) as usize;
        from.read_exact_at(&mut buffer[..chunk], at)?;
        to.write_all_at(&buffer[..chunk], at)?;
        at += chunk as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::PAGE_SIZE;
    use std::collections::btree_map;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("powerloss-fs-model-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn name(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn names_and_data_become_durable_only_when_synced() {
        let dir = scratch("names");
        let mut state = State::new(dir.clone(), 1).unwrap();
        let file = state.create_file(ROOT, name("a"), 0o644, 0, 0).unwrap();
        state.write(file, 0, b"hello").unwrap();
        state.fsync_file(file).unwrap();
        assert!(
            listing(&dir).is_empty(),
            "an fsync'd file without a directory fsync has no name"
        );
        state.write(file, 5, b" world").unwrap();
        state.fsync_dir(ROOT).unwrap();
        assert_eq!(listing(&dir), ["a"]);
        assert_eq!(
            fs::read(dir.join("a")).unwrap(),
            b"hello",
            "the name brings the synced data only"
        );
        assert_eq!(state.read(file, 0, 100).unwrap(), b"hello world");
        state.fsync_file(file).unwrap();
        assert_eq!(fs::read(dir.join("a")).unwrap(), b"hello world");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn renames_over_existing_names_and_swaps_apply_whole() {
        let dir = scratch("renames");
        fs::write(dir.join("x"), b"x").unwrap();
        fs::write(dir.join("y"), b"y").unwrap();
        fs::create_dir(dir.join("sub")).unwrap();
        let mut state = State::new(dir.clone(), 1).unwrap();
        let sub = state.lookup(ROOT, name("sub")).unwrap();
        // Swap x and y through a temporary name, then sync.
        state.rename(ROOT, name("x"), ROOT, name("t"), 0).unwrap();
        state.rename(ROOT, name("y"), ROOT, name("x"), 0).unwrap();
        state.rename(ROOT, name("t"), ROOT, name("y"), 0).unwrap();
        state.fsync_dir(ROOT).unwrap();
        assert_eq!(listing(&dir), ["sub", "x", "y"]);
        assert_eq!(fs::read(dir.join("x")).unwrap(), b"y");
        assert_eq!(fs::read(dir.join("y")).unwrap(), b"x");
        // A rename into another directory is whole once the target directory is synced.
        state
            .rename(ROOT, name("x"), sub, name("moved"), 0)
            .unwrap();
        state.fsync_dir(sub).unwrap();
        assert_eq!(listing(&dir), ["sub", "y"]);
        assert_eq!(listing(&dir.join("sub")), ["moved"]);
        // Removing a directory whose files were renamed out of it.
        state
            .rename(sub, name("moved"), ROOT, name("back"), 0)
            .unwrap();
        state.remove(ROOT, name("sub"), true).unwrap();
        state.fsync_dir(ROOT).unwrap();
        assert_eq!(listing(&dir), ["back", "y"]);
        assert_eq!(fs::read(dir.join("back")).unwrap(), b"y");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_fsync_makes_its_own_new_name_durable() {
        let dir = scratch("nested");
        let mut state = State::new(dir.clone(), 1).unwrap();
        let a = state.mkdir(ROOT, name("a"), 0o755, 0, 0).unwrap();
        let b = state.mkdir(a, name("b"), 0o755, 0, 0).unwrap();
        let f = state.create_file(b, name("f"), 0o644, 0, 0).unwrap();
        state.write(f, 0, b"data").unwrap();
        state.fsync_file(f).unwrap();
        state.fsync_dir(b).unwrap();
        assert_eq!(fs::read(dir.join("a/b/f")).unwrap(), b"data");
        // Replacing a durable directory by a renamed one, with the old one moved below it.
        state.rename(ROOT, name("a"), ROOT, name("old"), 0).unwrap();
        let fresh = state.mkdir(ROOT, name("a"), 0o755, 0, 0).unwrap();
        let old = state.lookup(ROOT, name("old")).unwrap();
        state
            .rename(ROOT, name("old"), fresh, name("inner"), 0)
            .unwrap();
        state.fsync_dir(ROOT).unwrap();
        assert_eq!(listing(&dir), ["a"]);
        assert_eq!(fs::read(dir.join("a/inner/b/f")).unwrap(), b"data");
        let _ = old;
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A plain in-memory file system: the reference for what the mount must show.
    #[derive(Clone, Debug, PartialEq)]
    enum Entry {
        Dir,
        File(Vec<u8>),
    }

    fn resolve(state: &mut State, path: &str) -> u64 {
        let mut ino = ROOT;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            ino = state.lookup(ino, OsStr::new(part)).unwrap();
        }
        ino
    }

    fn split(path: &str) -> (&str, &str) {
        let at = path.rfind('/').unwrap();
        (&path[..at], &path[at + 1..])
    }

    /// Everything the state shows, as the reference would hold it.
    fn volatile_view(state: &mut State, ino: u64, prefix: &str, out: &mut BTreeMap<String, Entry>) {
        let children: Vec<(OsString, u64)> = state
            .entries(ino)
            .unwrap()
            .iter()
            .map(|(n, i)| (n.clone(), *i))
            .collect();
        for (name, child) in children {
            let path = format!("{prefix}/{}", name.to_string_lossy());
            if state.node(child).unwrap().is_dir() {
                out.insert(path.clone(), Entry::Dir);
                volatile_view(state, child, &path, out);
            } else {
                out.insert(path, Entry::File(state.read(child, 0, u32::MAX).unwrap()));
            }
        }
    }

    fn disk_view(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Entry>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = format!("{prefix}/{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                out.insert(path.clone(), Entry::Dir);
                disk_view(&entry.path(), &path, out);
            } else {
                out.insert(path, Entry::File(fs::read(entry.path()).unwrap()));
            }
        }
    }

    fn children_of<'a>(reference: &'a BTreeMap<String, Entry>, dir: &str) -> Vec<&'a str> {
        reference
            .keys()
            .filter(|path| split(path).0 == dir)
            .map(|path| split(path).1)
            .collect()
    }

    #[test]
    fn random_operations_show_like_a_plain_file_system_and_sync_to_the_backing() {
        for seed in 0..200u64 {
            let dir = scratch(&format!("random-{seed}"));
            let mut state = State::new(dir.clone(), seed).unwrap();
            let mut reference: BTreeMap<String, Entry> = BTreeMap::new();
            let mut rng = Rng::new(seed);
            let mut pick = |n: usize| (rng.next_u64() % n as u64) as usize;
            let names = ["a", "b", "c", "d"];
            for step in 0..300 {
                let dirs: Vec<String> = std::iter::once(String::new())
                    .chain(
                        reference
                            .iter()
                            .filter(|(_, e)| **e == Entry::Dir)
                            .map(|(p, _)| p.clone()),
                    )
                    .collect();
                let files: Vec<String> = reference
                    .iter()
                    .filter(|(_, e)| matches!(e, Entry::File(_)))
                    .map(|(p, _)| p.clone())
                    .collect();
                let all: Vec<String> = reference.keys().cloned().collect();
                let context = format!("seed {seed} step {step}");
                match pick(10) {
                    0 | 1 => {
                        let parent = &dirs[pick(dirs.len())];
                        let path = format!("{parent}/{}", names[pick(names.len())]);
                        if let btree_map::Entry::Vacant(slot) = reference.entry(path.clone()) {
                            let p = resolve(&mut state, parent);
                            if pick(3) == 0 && parent.matches('/').count() < 3 {
                                state
                                    .mkdir(p, OsStr::new(split(&path).1), 0o755, 0, 0)
                                    .expect(&context);
                                slot.insert(Entry::Dir);
                            } else {
                                state
                                    .create_file(p, OsStr::new(split(&path).1), 0o644, 0, 0)
                                    .expect(&context);
                                slot.insert(Entry::File(Vec::new()));
                            }
                        }
                    }
                    2 | 3 if !files.is_empty() => {
                        let path = &files[pick(files.len())];
                        let offset = pick(3 * PAGE_SIZE as usize);
                        let len = 1 + pick(2 * PAGE_SIZE as usize);
                        let byte = (step % 250) as u8 + 1;
                        let ino = resolve(&mut state, path);
                        state
                            .write(ino, offset as u64, &vec![byte; len])
                            .expect(&context);
                        let Some(Entry::File(content)) = reference.get_mut(path) else {
                            unreachable!()
                        };
                        if content.len() < offset + len {
                            content.resize(offset + len, 0);
                        }
                        content[offset..offset + len].fill(byte);
                    }
                    4 if !files.is_empty() => {
                        let path = &files[pick(files.len())];
                        let size = pick(3 * PAGE_SIZE as usize);
                        let ino = resolve(&mut state, path);
                        state.truncate(ino, size as u64).expect(&context);
                        let Some(Entry::File(content)) = reference.get_mut(path) else {
                            unreachable!()
                        };
                        content.resize(size, 0);
                    }
                    5 if !files.is_empty() => {
                        let path = &files[pick(files.len())];
                        let ino = resolve(&mut state, path);
                        state.fsync_file(ino).expect(&context);
                        // Where the file's whole path is durable, the backing file is its content.
                        let mut settled = true;
                        let mut at = ino;
                        while at != ROOT {
                            settled &= state.is_settled(at);
                            at = state.node(at).unwrap().link.as_ref().unwrap().0;
                        }
                        if settled {
                            let on_disk =
                                fs::read(dir.join(path.trim_start_matches('/'))).expect(&context);
                            assert_eq!(Entry::File(on_disk), reference[path], "{context}");
                        }
                    }
                    6 => {
                        let path = &dirs[pick(dirs.len())];
                        let ino = resolve(&mut state, path);
                        state.fsync_dir(ino).expect(&context);
                        // The directory's entries are now durable, at its volatile path.
                        let mut on_disk: Vec<String> =
                            fs::read_dir(dir.join(path.trim_start_matches('/')))
                                .expect(&context)
                                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                                .collect();
                        on_disk.sort();
                        assert_eq!(on_disk, children_of(&reference, path), "{context}");
                    }
                    7 | 8 if !all.is_empty() => {
                        let from = all[pick(all.len())].clone();
                        let parent = &dirs[pick(dirs.len())];
                        let to = format!("{parent}/{}", names[pick(names.len())]);
                        let is_dir = reference[&from] == Entry::Dir;
                        let into_itself = to == from || to.starts_with(&format!("{from}/"));
                        let allowed = match reference.get(&to) {
                            None => true,
                            Some(Entry::Dir) => is_dir && children_of(&reference, &to).is_empty(),
                            Some(Entry::File(_)) => !is_dir,
                        };
                        if into_itself || !allowed {
                            continue;
                        }
                        let (fp, fname) = split(&from);
                        let (tp, tname) = split(&to);
                        let (fi, ti) = (resolve(&mut state, fp), resolve(&mut state, tp));
                        state
                            .rename(fi, OsStr::new(fname), ti, OsStr::new(tname), 0)
                            .expect(&context);
                        reference.remove(&to);
                        let moved: Vec<String> = reference
                            .keys()
                            .filter(|p| **p == from || p.starts_with(&format!("{from}/")))
                            .cloned()
                            .collect();
                        for old in moved {
                            let entry = reference.remove(&old).unwrap();
                            reference.insert(format!("{to}{}", &old[from.len()..]), entry);
                        }
                    }
                    9 if !all.is_empty() => {
                        let path = all[pick(all.len())].clone();
                        let is_dir = reference[&path] == Entry::Dir;
                        if is_dir && !children_of(&reference, &path).is_empty() {
                            continue;
                        }
                        let (parent, name) = split(&path);
                        let p = resolve(&mut state, parent);
                        state.remove(p, OsStr::new(name), is_dir).expect(&context);
                        reference.remove(&path);
                    }
                    _ => {}
                }
                if step % 25 == 0 {
                    let mut view = BTreeMap::new();
                    volatile_view(&mut state, ROOT, "", &mut view);
                    assert_eq!(view, reference, "seed {seed} step {step}");
                }
            }
            state.sync_all().unwrap();
            let mut on_disk = BTreeMap::new();
            disk_view(&dir, "", &mut on_disk);
            assert_eq!(
                on_disk, reference,
                "seed {seed}: after sync_all the backing is the view"
            );
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_failed_fsync_drops_the_unsynced_data_of_that_file() {
        let dir = scratch("fail");
        let mut state = State::new(dir.clone(), 1).unwrap();
        let f = state.create_file(ROOT, name("f"), 0o644, 0, 0).unwrap();
        state.fsync_dir(ROOT).unwrap();
        state.write(f, 0, b"one").unwrap();
        state.fail_fsync(2);
        state.fsync_file(f).unwrap();
        state.write(f, 3, b"two").unwrap();
        assert_eq!(
            state.fsync_file(f).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        assert_eq!(state.read(f, 0, 100).unwrap(), b"one");
        state.fsync_file(f).unwrap();
        assert_eq!(fs::read(dir.join("f")).unwrap(), b"one");
        fs::remove_dir_all(&dir).unwrap();
    }
}
