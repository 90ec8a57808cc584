//! The mounted folder as the kernel sees it: inodes for the paths it has
//! looked up, folder listings cached briefly (and dropped at once when a
//! change comes through the mount or `Watch` reports one), open files
//! buffered locally and saved as one version when closed or fsynced.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use agentvfs_proto::v1 as pb;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenAccMode,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};

use super::content::ContentCache;
use super::remote::{Child, Failure, Remote};

/// How long a listing is reused: changes made elsewhere show within about
/// this long even when `Watch` is late to report them.
const TTL: Duration = Duration::from_secs(1);

/// How long the kernel may keep a name or an attribute. A change made
/// elsewhere makes the kernel forget what it made stale as soon as `Watch`
/// reports it (see [`Shared::seen`]), and a broken `Watch` makes it forget
/// everything, so this is only the bound for a report that never came; a
/// warm walk of the tree meanwhile costs the mount no call.
const KERNEL_TTL: Duration = Duration::from_secs(10);

/// Who owns every file of the mount, and how it may be changed.
#[derive(Debug, Clone)]
pub struct Options {
    pub read_only: bool,
    pub cache_bytes: usize,
    /// Where a draft goes when its save conflicts with a change made elsewhere.
    pub recovery: PathBuf,
    pub uid: u32,
    pub gid: u32,
}

/// The mounted folder (see the module docs).
#[derive(Debug)]
pub struct MountFs {
    remote: Remote,
    options: Options,
    shared: Arc<Shared>,
    content: Mutex<ContentCache>,
    /// The mounted folder's time (the service keeps none for folders).
    mounted: SystemTime,
}

/// What the FUSE threads and the `Watch` follower share.
#[derive(Debug)]
pub struct Shared {
    state: Mutex<State>,
    /// Revisions this mount made, whose changes its listings already show:
    /// their `Watch` events change nothing here.
    own: Mutex<VecDeque<u64>>,
    /// This mount's changes waiting for their replies; see [`Shared::answered`].
    sending: Mutex<Sending>,
    /// Told whenever one of `sending` is answered.
    answers: tokio::sync::Notify,
    removals: Removals,
}

/// Tickets of the changes on their way to the front, in the order sent.
#[derive(Debug, Default)]
struct Sending {
    next: u64,
    waiting: BTreeSet<u64>,
}

/// A change on its way: answered (its revision, if any, recorded with
/// [`Shared::made`]) when dropped.
struct Sent<'a> {
    shared: &'a Shared,
    ticket: u64,
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        lock(&self.shared.sending).waiting.remove(&self.ticket);
        self.shared.answers.notify_waiters();
    }
}

/// Files unlinked here, on their way to the trash. As on a local disk, an
/// unlink is done for this mount at once and durable later: the removals
/// go to the front as batches of up to [`BATCH_ACTIONS`] trash actions,
/// before any call that could see their paths (a listing, a save, any
/// other change), once the oldest is [`REMOVAL_DELAY`] old, on fsync of a
/// folder, and at unmount. So `rm -r` of a folder of 50 files is three
/// calls, not 50; a folder's own removal (rmdir) is sent at once.
#[derive(Debug)]
struct Removals {
    remote: Remote,
    queue: Mutex<Queued>,
    /// Held while removals are sent: a call that must come after them
    /// waits for those already on their way.
    sending: Mutex<()>,
}

#[derive(Debug, Default)]
struct Queued {
    paths: VecDeque<String>,
    /// When the oldest of `paths` was queued.
    since: Option<Instant>,
}

/// Actions in one `Batch` (SPEC §7).
const BATCH_ACTIONS: usize = 20;

/// How long an unlink may wait for others to share its call.
pub const REMOVAL_DELAY: Duration = Duration::from_millis(50);

/// How many of its own revisions the mount remembers.
const OWN_REVISIONS: usize = 4096;

#[derive(Debug)]
struct State {
    /// Inode number ↔ space path, for every path the kernel was told of.
    paths: HashMap<u64, String>,
    inodes: HashMap<String, u64>,
    next_inode: u64,
    /// Listings by folder path.
    listings: HashMap<String, Listing>,
    /// Open files by inode: every descriptor of a file shares its buffer,
    /// so a reader sees what a writer wrote before it is saved.
    files: HashMap<u64, Opened>,
    /// Open file handles: their inode.
    handles: HashMap<u64, u64>,
    /// Open folders: what each listed when it was opened.
    folders: HashMap<u64, Arc<Vec<DirEntry>>>,
    next_handle: u64,
    /// Inodes whose file was removed while open: closing them saves nothing.
    removed: HashSet<u64>,
    /// How many times each inode was given to the kernel (lookup, create,
    /// mkdir) and not forgotten: an inode the kernel forgot and nobody
    /// holds open is dropped, so memory follows what the kernel caches
    /// rather than every path ever seen.
    lookups: HashMap<u64, u64>,
    /// The content (hash) whose pages the kernel may cache for an inode: it
    /// was last opened to read it, unchanged. An open of the same content
    /// keeps those pages (`FOPEN_KEEP_CACHE`), so a warm read costs no
    /// call; any other open drops them.
    cached: HashMap<u64, String>,
}

/// One entry of an open folder: inode, kind, name.
type DirEntry = (u64, FileType, String);

#[derive(Debug)]
struct Listing {
    fetched: Instant,
    children: Arc<Vec<Child>>,
}

/// A file open through the mount, and how many handles hold it.
#[derive(Debug)]
struct Opened {
    file: Arc<Mutex<OpenFile>>,
    handles: usize,
}

/// A file opened through the mount.
#[derive(Debug)]
struct OpenFile {
    inode: u64,
    /// The version seen at open, which a save must still find (0: a new file).
    version: u64,
    hash: String,
    size: u64,
    modified: SystemTime,
    /// The whole file, once it is written to (or opened to be written).
    buffer: Option<Vec<u8>>,
    /// Changed since the last save.
    dirty: bool,
    executable: bool,
}

impl OpenFile {
    /// The file `child` as its folder lists it, opened: nothing read or
    /// changed yet.
    fn listed(inode: u64, child: Child) -> OpenFile {
        OpenFile {
            inode,
            version: child.version,
            hash: child.hash,
            size: child.size,
            modified: child.modified,
            buffer: None,
            dirty: false,
            executable: child.executable,
        }
    }
}

/// What an inode is, as its mode shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Directory,
    File { executable: bool },
}

impl Shape {
    fn of(child: &Child) -> Shape {
        if child.directory { Shape::Directory } else { Shape::File { executable: child.executable } }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `parent/name` in the space.
fn join(parent: &str, name: &str) -> String {
    if parent == "/" { format!("/{name}") } else { format!("{parent}/{name}") }
}

/// The folder and the name of `path`.
fn split(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((parent, name)) => (parent, name),
        None => ("/", path),
    }
}

fn name_of(name: &OsStr) -> Result<&str, Errno> {
    match name.to_str() {
        Some(name) if !name.is_empty() && name != "." && name != ".." => Ok(name),
        // The service keeps UTF-8 paths only.
        _ => Err(Errno::EINVAL),
    }
}

impl Shared {
    /// Marks a change as on its way until the returned guard drops, which
    /// must be after its revision is recorded with [`Shared::made`].
    fn send(&self) -> Sent<'_> {
        let mut sending = lock(&self.sending);
        let ticket = sending.next;
        sending.next += 1;
        sending.waiting.insert(ticket);
        Sent { shared: self, ticket }
    }

    /// Waits until every change this mount had sent when called is
    /// answered. The front reports a change on `Watch` as soon as it is
    /// made, often before the reply that tells this mount the change's
    /// revision: an event is weighed only after this, so that the mount's
    /// own changes do not drop the listings they have just updated. Each
    /// call is bounded by the remote's deadline, so this is too.
    pub async fn answered(&self) {
        let sent = lock(&self.sending).next;
        loop {
            let answer = self.answers.notified();
            tokio::pin!(answer);
            // Registered before looking, so no answer in between is missed.
            answer.as_mut().enable();
            if lock(&self.sending).waiting.first().is_none_or(|&ticket| ticket >= sent) {
                return;
            }
            answer.await;
        }
    }

    /// A change seen on `Watch`: forgets the listings it makes stale,
    /// unless the change is this mount's own, and returns what the kernel
    /// must forget.
    pub fn seen(&self, revision: u64, path: &str, old_path: &str) -> Vec<Stale> {
        if lock(&self.own).contains(&revision) {
            return Vec::new();
        }
        self.changed(path, old_path)
    }

    /// Remembers a revision this mount made.
    fn made(&self, revision: u64) {
        let mut own = lock(&self.own);
        if own.len() == OWN_REVISIONS {
            own.pop_front();
        }
        own.push_back(revision);
    }

    /// This mount changed the folder `folder`: `update` edits its listing
    /// where it is kept, so that the next lookup needs no call.
    fn update(&self, folder: &str, update: impl FnOnce(&mut Vec<Child>)) {
        let mut state = lock(&self.state);
        if let Some(listing) = state.listings.get_mut(folder) {
            update(Arc::make_mut(&mut listing.children));
        }
    }

    /// `child` is now in `folder` (replacing one of the same name).
    fn put(&self, folder: &str, child: Child) {
        self.update(folder, |children| match children.iter_mut().find(|c| c.name == child.name) {
            Some(existing) => *existing = child,
            None => children.push(child),
        });
    }

    /// `name` is no longer in `folder`.
    fn take(&self, folder: &str, name: &str) -> Option<Child> {
        let mut taken = None;
        self.update(folder, |children| {
            if let Some(index) = children.iter().position(|c| c.name == name) {
                taken = Some(children.remove(index));
            }
        });
        taken
    }

    /// Forgets the listings a change at `path` (and `old_path`) makes
    /// stale, and returns the names and inodes the kernel must forget.
    pub fn changed(&self, path: &str, old_path: &str) -> Vec<Stale> {
        let mut state = lock(&self.state);
        let mut stale = Vec::new();
        for changed in [path, old_path].into_iter().filter(|p| !p.is_empty()) {
            state.listings.remove(changed);
            state.listings.remove(split(changed).0);
            stale.extend(state.stale(changed));
        }
        stale
    }

    /// Queues the removal of `path` (see [`Removals`]); sends the queue
    /// first when it is full.
    fn remove_later(&self, path: &str) -> Result<(), Failure> {
        if lock(&self.removals.queue).paths.len() >= BATCH_ACTIONS {
            self.settle()?;
        }
        let mut queue = lock(&self.removals.queue);
        queue.paths.push_back(path.to_owned());
        queue.since.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Whether the oldest queued removal has waited [`REMOVAL_DELAY`].
    pub fn removals_due(&self) -> bool {
        lock(&self.removals.queue).since.is_some_and(|since| since.elapsed() >= REMOVAL_DELAY)
    }

    /// Sends every queued removal, in order. Without an answer from the
    /// front, they stay queued and the caller fails with `EIO`; a removal
    /// the front refuses otherwise is logged, and the file shows again.
    pub fn settle(&self) -> Result<(), Failure> {
        let _turn = lock(&self.removals.sending);
        loop {
            let paths: Vec<String> = {
                let mut queue = lock(&self.removals.queue);
                let count = queue.paths.len().min(BATCH_ACTIONS);
                if count == 0 {
                    queue.since = None;
                    return Ok(());
                }
                queue.paths.drain(..count).collect()
            };
            if let Err(failure) = self.send_removals(&paths) {
                let mut queue = lock(&self.removals.queue);
                for path in paths.into_iter().rev() {
                    queue.paths.push_front(path);
                }
                return Err(failure);
            }
        }
    }

    fn send_removals(&self, paths: &[String]) -> Result<(), Failure> {
        let trash = |path: &String| pb::batch_action::Action::Trash(pb::TrashAction { path: path.clone() });
        let _sent = self.send();
        match self.removals.remote.batch(paths.iter().map(trash).collect()) {
            Ok(revision) => {
                self.made(revision);
                Ok(())
            }
            // Removed elsewhere meanwhile, which is what was asked; the
            // batch changed nothing, so the others go one by one.
            Err(Failure::Errno(Errno::ENOENT, _)) if paths.len() > 1 => {
                paths.iter().try_for_each(|path| self.send_removals(std::slice::from_ref(path)))
            }
            Err(Failure::Errno(Errno::ENOENT, _)) => Ok(()),
            Err(failure @ Failure::Errno(Errno::EIO, _)) => {
                eprintln!("agentvfs mount: removals wait for the front: {failure}");
                Err(failure)
            }
            Err(failure) => {
                eprintln!("agentvfs mount: {} could not be removed ({failure}); shown again", paths.join(", "));
                // The kernel forgot the names when they were unlinked: the
                // next lookups come here, and find them again.
                drop(self.forget_listings());
                Ok(())
            }
        }
    }

    /// Forgets every listing (the `Watch` stream broke: changes may be
    /// missed), and returns every name and inode the kernel may hold.
    pub fn forget_listings(&self) -> Vec<Stale> {
        let mut state = lock(&self.state);
        state.listings.clear();
        let paths: Vec<String> = state.inodes.keys().cloned().collect();
        paths.iter().flat_map(|path| state.stale(path)).collect()
    }
}

/// A name or an inode whose attributes the kernel may cache, made stale by
/// a change elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    Name { parent: u64, name: String },
    Inode(u64),
}

impl Stale {
    /// Tells the kernel to forget it. The kernel may hold it no longer,
    /// which is not an error.
    pub fn notify(&self, notifier: &fuser::Notifier) {
        let _ = match self {
            Stale::Name { parent, name } => notifier.inval_entry(INodeNo(*parent), OsStr::new(name)),
            // Attributes alone: an open of other content drops the pages.
            Stale::Inode(inode) => notifier.inval_inode(INodeNo(*inode), -1, 0),
        };
    }
}

impl State {
    fn new(root: &str) -> State {
        let mut state = State {
            paths: HashMap::new(),
            inodes: HashMap::new(),
            next_inode: INodeNo::ROOT.0 + 1,
            listings: HashMap::new(),
            files: HashMap::new(),
            handles: HashMap::new(),
            folders: HashMap::new(),
            next_handle: 0,
            removed: HashSet::new(),
            lookups: HashMap::new(),
            cached: HashMap::new(),
        };
        state.paths.insert(INodeNo::ROOT.0, root.to_owned());
        state.inodes.insert(root.to_owned(), INodeNo::ROOT.0);
        state
    }

    /// What the kernel may cache of `path`: its name in its folder, and its
    /// inode's attributes.
    fn stale(&self, path: &str) -> Vec<Stale> {
        let mut stale = Vec::new();
        let root = self.paths.get(&INodeNo::ROOT.0).map(String::as_str);
        if root != Some(path)
            && let Some(&parent) = self.inodes.get(split(path).0)
        {
            stale.push(Stale::Name { parent, name: split(path).1.to_owned() });
        }
        stale.extend(self.inodes.get(path).map(|&inode| Stale::Inode(inode)));
        stale
    }

    /// The inode of `path`, given to the kernel once more: counted in the
    /// same step, so that a concurrent forget cannot drop it in between.
    fn refer(&mut self, path: &str) -> u64 {
        let inode = self.inode(path);
        *self.lookups.entry(inode).or_default() += 1;
        inode
    }

    /// The kernel let go of `count` of its references to `inode`.
    fn forget(&mut self, inode: u64, count: u64) {
        if let Some(held) = self.lookups.get_mut(&inode) {
            *held = held.saturating_sub(count);
            if *held == 0 {
                self.lookups.remove(&inode);
            }
        }
        self.drop_if_unused(inode);
    }

    /// Drops `inode`'s path unless the kernel or an open file still holds it
    /// (the root always stays). The path gets a new inode if it comes back.
    fn drop_if_unused(&mut self, inode: u64) {
        if inode == INodeNo::ROOT.0 || self.lookups.contains_key(&inode) || self.files.contains_key(&inode) {
            return;
        }
        self.cached.remove(&inode);
        if let Some(path) = self.paths.remove(&inode)
            && self.inodes.get(&path) == Some(&inode)
        {
            self.inodes.remove(&path);
        }
    }

    /// Whether the kernel may keep its cached pages of `inode` for an open
    /// of the content `hash`: only a read of the very content it last
    /// opened to read. `written`: the open writes, or the file holds
    /// unsaved writes. Remembers what this open leaves in the cache.
    fn keep_cache(&mut self, inode: u64, hash: &str, written: bool) -> bool {
        if written {
            // Written pages may be partial or unsaved: the next open drops them.
            self.cached.remove(&inode);
            return false;
        }
        self.cached.insert(inode, hash.to_owned()).is_some_and(|cached| cached == hash)
    }

    /// The inode number a listing shows for `path`: its inode when the
    /// kernel holds one, else a number of its own that nothing keeps (a
    /// lookup, not a listing, gives the kernel an inode, so a folder listed
    /// and never looked into costs no memory).
    fn listed_inode(&mut self, path: &str) -> u64 {
        self.inodes.get(path).copied().unwrap_or_else(|| {
            self.next_inode += 1;
            self.next_inode - 1
        })
    }

    fn path(&self, inode: INodeNo) -> Result<String, Errno> {
        self.paths.get(&inode.0).cloned().ok_or(Errno::ENOENT)
    }

    fn inode(&mut self, path: &str) -> u64 {
        if let Some(inode) = self.inodes.get(path) {
            return *inode;
        }
        let inode = self.next_inode;
        self.next_inode += 1;
        self.paths.insert(inode, path.to_owned());
        self.inodes.insert(path.to_owned(), inode);
        inode
    }

    /// The path is gone: a later file there is another inode, and an open
    /// file that was there saves nothing when it is closed.
    fn remove(&mut self, path: &str) {
        if let Some(inode) = self.inodes.remove(path) {
            self.paths.remove(&inode);
            if self.files.contains_key(&inode) {
                self.removed.insert(inode);
            }
        }
    }

    /// `from` (and everything below it) is now at `to`.
    fn rename(&mut self, from: &str, to: &str) {
        let below = format!("{from}/");
        let moved: Vec<(String, u64)> = self
            .inodes
            .iter()
            .filter(|(path, _)| *path == from || path.starts_with(&below))
            .map(|(path, inode)| (path.clone(), *inode))
            .collect();
        for (path, inode) in moved {
            self.inodes.remove(&path);
            let renamed = format!("{to}{}", &path[from.len()..]);
            self.paths.insert(inode, renamed.clone());
            self.inodes.insert(renamed, inode);
        }
    }

    fn handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }
}

impl MountFs {
    /// A mount of the folder `root` (a space path) served by `remote`.
    pub fn new(remote: Remote, root: &str, options: Options) -> MountFs {
        let state = State::new(root);
        let content = Mutex::new(ContentCache::new(options.cache_bytes));
        let removals = Removals { remote: remote.clone(), queue: Mutex::default(), sending: Mutex::new(()) };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            own: Mutex::new(VecDeque::new()),
            sending: Mutex::default(),
            answers: tokio::sync::Notify::new(),
            removals,
        });
        MountFs { remote, options, shared, content, mounted: SystemTime::now() }
    }

    /// What the `Watch` follower updates.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// The size of `inode` as an open file being written holds it. The
    /// files are locked after the state is let go: a save holds its file
    /// while it takes the state.
    fn open_attr(&self, inode: u64) -> Option<FileAttr> {
        let file = self.state().files.get(&inode).map(|opened| opened.file.clone())?;
        let file = lock(&file);
        // A file created here has no entry on the server until it is saved.
        (file.buffer.is_some() || file.version == 0)
            .then(|| self.attr(inode, Shape::File { executable: file.executable }, file.size, file.modified))
    }

    fn writable(&self) -> Result<(), Errno> {
        if self.options.read_only { Err(Errno::EROFS) } else { Ok(()) }
    }

    fn attr(&self, inode: u64, shape: Shape, size: u64, modified: SystemTime) -> FileAttr {
        let directory = shape == Shape::Directory;
        let mut perm = match shape {
            Shape::Directory | Shape::File { executable: true } => 0o755,
            Shape::File { executable: false } => 0o644,
        };
        if self.options.read_only {
            perm &= 0o555;
        }
        FileAttr {
            ino: INodeNo(inode),
            size,
            blocks: size.div_ceil(512),
            atime: modified,
            mtime: modified,
            ctime: modified,
            crtime: modified,
            kind: if directory { FileType::Directory } else { FileType::RegularFile },
            perm,
            nlink: if directory { 2 } else { 1 },
            uid: self.options.uid,
            gid: self.options.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The entries of the folder `path`, fetched again once they are older
    /// than [`TTL`].
    fn listing(&self, path: &str) -> Result<Arc<Vec<Child>>, Failure> {
        if let Some(listing) = self.state().listings.get(path)
            && listing.fetched.elapsed() < TTL
        {
            return Ok(listing.children.clone());
        }
        self.shared.settle()?;
        let fetched = Instant::now();
        let children = Arc::new(self.remote.list(path)?);
        let listing = Listing { fetched, children: children.clone() };
        self.state().listings.insert(path.to_owned(), listing);
        Ok(children)
    }

    /// The entries of the folder `path` on the front now, after the
    /// removals on their way.
    fn listing_now(&self, path: &str) -> Result<Vec<Child>, Errno> {
        self.shared.settle().and_then(|()| self.remote.list(path)).map_err(|failure| failure.errno())
    }

    /// The attributes of the inode at `path`.
    fn attr_at(&self, inode: u64, path: &str) -> Result<FileAttr, Errno> {
        if inode == INodeNo::ROOT.0 {
            return Ok(self.attr(inode, Shape::Directory, 0, self.mounted));
        }
        if let Some(attr) = self.open_attr(inode) {
            return Ok(attr);
        }
        let (parent, name) = split(path);
        let listing = self.listing(parent).map_err(|failure| failure.errno())?;
        let child = listing.iter().find(|child| child.name == name).ok_or(Errno::ENOENT)?;
        Ok(self.attr(inode, Shape::of(child), child.size, child.modified))
    }

    /// The entry of `path` in its folder, as listed now.
    fn child(&self, path: &str) -> Result<Option<Child>, Errno> {
        let (parent, name) = split(path);
        let listing = self.listing(parent).map_err(|failure| failure.errno())?;
        Ok(listing.iter().find(|child| child.name == name).cloned())
    }

    /// The bytes of `version` of the file at `path` whose content is `hash`.
    fn content(&self, path: &str, version: u64, hash: &str) -> Result<Arc<Vec<u8>>, Failure> {
        if let Some(content) = lock(&self.content).get(hash) {
            return Ok(content);
        }
        let content = Arc::new(self.remote.download(path, version)?);
        lock(&self.content).put(hash.to_owned(), content.clone());
        Ok(content)
    }

    /// Loads the file's bytes into its buffer, to be written.
    fn load(&self, path: &str, file: &mut OpenFile) -> Result<(), Failure> {
        if file.buffer.is_none() {
            let bytes = if file.version == 0 {
                Vec::new()
            } else {
                self.content(path, file.version, &file.hash)?.as_ref().clone()
            };
            file.size = bytes.len() as u64;
            file.buffer = Some(bytes);
        }
        Ok(())
    }

    /// Saves an open file's changes as one version, against the version it
    /// was opened at. A conflict keeps the draft in the recovery folder.
    fn save(&self, file: &mut OpenFile) -> Result<(), Errno> {
        if !file.dirty {
            return Ok(());
        }
        let path = {
            let state = self.state();
            if state.removed.contains(&file.inode) {
                // Removed while open: nothing to keep, as on a local disk.
                file.dirty = false;
                return Ok(());
            }
            state.paths.get(&file.inode).cloned().ok_or(Errno::ENOENT)?
        };
        let bytes = file.buffer.as_deref().unwrap_or_default();
        self.shared.settle().map_err(|failure| failure.errno())?;
        let _sent = self.shared.send();
        match self.remote.save(&path, file.version, file.executable, bytes) {
            Ok(saved) => {
                self.shared.made(saved.revision);
                lock(&self.content).put(saved.hash.clone(), Arc::new(bytes.to_vec()));
                let (folder, name) = split(&path);
                let child = Child {
                    name: name.to_owned(),
                    directory: false,
                    size: bytes.len() as u64,
                    version: saved.version,
                    hash: saved.hash.clone(),
                    modified: file.modified,
                    executable: file.executable,
                };
                self.shared.put(folder, child);
                file.version = saved.version;
                file.hash = saved.hash;
                file.dirty = false;
                Ok(())
            }
            Err(Failure::Conflict(message) | Failure::Errno(Errno::EEXIST, message)) => {
                file.dirty = false;
                match self.keep_draft(&path, bytes) {
                    Ok(draft) => eprintln!(
                        "agentvfs mount: {path} changed on the server since it was opened ({message}); \
                         nothing was overwritten, and this copy is kept at {}",
                        draft.display()
                    ),
                    Err(error) => eprintln!(
                        "agentvfs mount: {path} changed on the server since it was opened ({message}); \
                         the local copy could not be kept in {}: {error}",
                        self.options.recovery.display()
                    ),
                }
                // The next open sees the server's version. The kernel was
                // told of that version by `Watch` (and must not be told from
                // a call it is waiting on).
                drop(self.shared.changed(&path, ""));
                Err(Errno::EIO)
            }
            Err(failure) => {
                eprintln!("agentvfs mount: cannot save {path}: {failure}");
                Err(failure.errno())
            }
        }
    }

    /// Writes `bytes` into the recovery folder; returns where.
    fn keep_draft(&self, path: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.options.recovery)?;
        let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis();
        let name = format!("{stamp}{}", path.replace('/', "%2F"));
        let draft = self.options.recovery.join(name);
        std::fs::write(&draft, bytes)?;
        Ok(draft)
    }

    /// The files created in the folder `path` through the mount and open,
    /// not saved yet (so not in its listing): inode and name.
    fn created_in(&self, path: &str, listing: &[Child]) -> Vec<(u64, String)> {
        let candidates: Vec<_> = {
            let state = self.state();
            state
                .files
                .iter()
                .filter_map(|(inode, opened)| {
                    let (parent, name) = split(state.paths.get(inode)?);
                    let listed = listing.iter().any(|child| child.name == name);
                    (parent == path && !listed).then(|| (*inode, name.to_owned(), opened.file.clone()))
                })
                .collect()
        };
        candidates
            .into_iter()
            .filter(|(_, _, file)| lock(file).version == 0)
            .map(|(inode, name, _)| (inode, name))
            .collect()
    }

    /// A new handle on the open file of `inode`: the one open already, else
    /// `fresh` (`None` when there is none and no `fresh`).
    fn hold(&self, inode: u64, fresh: Option<OpenFile>) -> Option<(u64, Arc<Mutex<OpenFile>>)> {
        let mut state = self.state();
        let file = match state.files.get_mut(&inode) {
            Some(opened) => {
                opened.handles += 1;
                opened.file.clone()
            }
            None => {
                let file = Arc::new(Mutex::new(fresh?));
                state.files.insert(inode, Opened { file: file.clone(), handles: 1 });
                file
            }
        };
        let handle = state.handle();
        state.handles.insert(handle, inode);
        Some((handle, file))
    }

    fn open_file(&self, handle: FileHandle) -> Result<Arc<Mutex<OpenFile>>, Errno> {
        let state = self.state();
        let inode = state.handles.get(&handle.0).ok_or(Errno::EBADF)?;
        state.files.get(inode).map(|opened| opened.file.clone()).ok_or(Errno::EBADF)
    }

    fn apply(&self, actions: Vec<pb::batch_action::Action>) -> Result<(), Errno> {
        self.shared.settle().map_err(|failure| failure.errno())?;
        let _sent = self.shared.send();
        match self.remote.batch(actions) {
            Ok(revision) => {
                self.shared.made(revision);
                Ok(())
            }
            Err(failure) => {
                eprintln!("agentvfs mount: {failure}");
                Err(failure.errno())
            }
        }
    }

    /// Moves the file or (empty) folder at `path` to the trash.
    /// Saves the file at `path` if it is open with unsaved changes (one
    /// created here and not closed yet, say), so that the service has
    /// something to move or trash.
    fn save_open(&self, path: &str) -> Result<(), Errno> {
        let open = {
            let state = self.state();
            state.inodes.get(path).and_then(|inode| state.files.get(inode)).map(|opened| opened.file.clone())
        };
        match open {
            Some(file) => self.save(&mut lock(&file)),
            None => Ok(()),
        }
    }

    fn trash(&self, path: &str) -> Result<(), Errno> {
        self.apply(vec![pb::batch_action::Action::Trash(pb::TrashAction { path: path.to_owned() })])?;
        self.removed(path);
        Ok(())
    }

    /// `path` is gone, by this mount's doing.
    fn removed(&self, path: &str) {
        let mut state = self.state();
        state.remove(path);
        state.listings.remove(path);
        drop(state);
        let (folder, name) = split(path);
        self.shared.take(folder, name);
    }

    fn do_rename(&self, from: &str, to: &str, flags: RenameFlags) -> Result<(), Errno> {
        use pb::batch_action::Action;
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return Err(Errno::ENOTSUP);
        }
        self.save_open(from)?;
        let source = self.child(from)?.ok_or(Errno::ENOENT)?;
        let mut actions = Vec::new();
        if let Some(target) = self.child(to)? {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            match (source.directory, target.directory) {
                (false, true) => return Err(Errno::EISDIR),
                (true, false) => return Err(Errno::ENOTDIR),
                (true, true) if !self.listing_now(to)?.is_empty() => {
                    return Err(Errno::ENOTEMPTY);
                }
                _ => {}
            }
            // Replaced in the same atomic batch, as rename(2) replaces.
            actions.push(Action::Trash(pb::TrashAction { path: to.to_owned() }));
        }
        let ((from_folder, from_name), (to_folder, to_name)) = (split(from), split(to));
        if from_folder == to_folder {
            actions.push(Action::Rename(pb::RenameAction { path: from.to_owned(), new_name: to_name.to_owned() }));
        } else {
            let mut moving = from.to_owned();
            if from_name != to_name {
                actions.push(Action::Rename(pb::RenameAction { path: from.to_owned(), new_name: to_name.to_owned() }));
                moving = join(from_folder, to_name);
            }
            actions.push(Action::Move(pb::MoveAction {
                from: moving,
                to_folder: to_folder.to_owned(),
                to_space: String::new(),
            }));
        }
        self.apply(actions)?;
        let mut state = self.state();
        state.remove(to);
        state.rename(from, to);
        // Listings of a renamed folder and of what was in it go.
        let (old_below, new_below) = (format!("{from}/"), format!("{to}/"));
        state.listings.retain(|folder, _| {
            !(folder == from || folder == to || folder.starts_with(&old_below) || folder.starts_with(&new_below))
        });
        drop(state);
        self.shared.take(from_folder, from_name);
        self.shared.put(to_folder, Child { name: to_name.to_owned(), ..source });
        Ok(())
    }

    /// truncate(2) and chmod(2) of the executable bit: they change what is
    /// open, or make a new version at once when the file is not open.
    fn do_setattr(
        &self,
        inode: INodeNo,
        size: Option<u64>,
        executable: Option<bool>,
        handle: Option<FileHandle>,
    ) -> Result<FileAttr, Errno> {
        let path = self.state().path(inode)?;
        let change = |file: &mut OpenFile| -> Result<bool, Errno> {
            let flips = executable.is_some_and(|on| on != file.executable);
            if size.is_none() && !flips {
                return Ok(false);
            }
            self.writable()?;
            self.load(&path, file).map_err(|failure| failure.errno())?;
            if let Some(size) = size {
                if let Some(buffer) = &mut file.buffer {
                    buffer.resize(size as usize, 0);
                }
                file.size = size;
            }
            file.executable = executable.unwrap_or(file.executable);
            file.dirty = true;
            file.modified = SystemTime::now();
            Ok(true)
        };
        if size.is_some() || executable.is_some() {
            let open = match handle {
                Some(handle) => self.open_file(handle).ok(),
                // truncate(2) of an open file changes what is open.
                None => self.state().files.get(&inode.0).map(|opened| opened.file.clone()),
            };
            match open {
                Some(file) => {
                    change(&mut lock(&file))?;
                }
                None => {
                    let child = self.child(&path)?.ok_or(Errno::ENOENT)?;
                    match child.directory {
                        true if size.is_some() => return Err(Errno::EISDIR),
                        // Folders have no executable bit of their own.
                        true => {}
                        false => {
                            let mut file = OpenFile::listed(inode.0, child);
                            if change(&mut file)? {
                                self.save(&mut file)?;
                            }
                        }
                    }
                }
            }
        }
        // Other mode bits, owners and times come from the service: accepted, unchanged.
        self.attr_at(inode.0, &path)
    }
}

impl Filesystem for MountFs {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // open(O_TRUNC) arrives as one open, not an open and a truncate that
        // would save an empty version first.
        if let Err(unsupported) = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC) {
            eprintln!("agentvfs mount: the kernel lacks {unsupported:?}");
        }
        Ok(())
    }

    fn forget(&self, _req: &Request, inode: INodeNo, count: u64) {
        self.state().forget(inode.0, count);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = (|| {
            let name = name_of(name)?;
            let path = join(&self.state().path(parent)?, name);
            // An open file answers for itself (one created here is not
            // listed until it is saved).
            let inode = self.state().inodes.get(&path).copied();
            if let Some(attr) = inode.and_then(|inode| self.open_attr(inode))
                && self.state().refer(&path) == attr.ino.0
            {
                return Ok(attr);
            }
            let child = self.child(&path)?.ok_or(Errno::ENOENT)?;
            let inode = self.state().refer(&path);
            Ok(self.attr(inode, Shape::of(&child), child.size, child.modified))
        })();
        match found {
            Ok(attr) => reply.entry(&KERNEL_TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn getattr(&self, _req: &Request, inode: INodeNo, _handle: Option<FileHandle>, reply: ReplyAttr) {
        let path = self.state().path(inode);
        match path.and_then(|path| self.attr_at(inode.0, &path)) {
            Ok(attr) => reply.attr(&KERNEL_TTL, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        inode: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        handle: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let executable = mode.map(|mode| mode & 0o111 != 0);
        match self.do_setattr(inode, size, executable, handle) {
            Ok(attr) => reply.attr(&KERNEL_TTL, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        let made = (|| {
            self.writable()?;
            let path = join(&self.state().path(parent)?, name_of(name)?);
            self.apply(vec![pb::batch_action::Action::Mkdir(pb::MkdirAction { path: path.clone() })])?;
            let now = SystemTime::now();
            let (folder, name) = split(&path);
            let made = Child {
                name: name.to_owned(),
                directory: true,
                size: 0,
                version: 0,
                hash: String::new(),
                modified: now,
                executable: false,
            };
            self.shared.put(folder, made);
            let mut state = self.state();
            // A new folder is empty: nothing to ask for its first lookups.
            state.listings.insert(path.clone(), Listing { fetched: Instant::now(), children: Arc::default() });
            let inode = state.refer(&path);
            Ok(self.attr(inode, Shape::Directory, 0, now))
        })();
        match made {
            Ok(attr) => reply.entry(&KERNEL_TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let removed = (|| {
            self.writable()?;
            let path = join(&self.state().path(parent)?, name_of(name)?);
            self.save_open(&path)?;
            if self.child(&path)?.ok_or(Errno::ENOENT)?.directory {
                return Err(Errno::EISDIR);
            }
            self.shared.remove_later(&path).map_err(|failure| failure.errno())?;
            self.removed(&path);
            Ok(())
        })();
        match removed {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let removed = (|| {
            self.writable()?;
            let path = join(&self.state().path(parent)?, name_of(name)?);
            if !self.child(&path)?.ok_or(Errno::ENOENT)?.directory {
                return Err(Errno::ENOTDIR);
            }
            if !self.listing_now(&path)?.is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
            self.trash(&path)
        })();
        match removed {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let renamed = (|| {
            self.writable()?;
            let from = join(&self.state().path(parent)?, name_of(name)?);
            let to = join(&self.state().path(new_parent)?, name_of(new_name)?);
            if from == to {
                return Ok(());
            }
            self.do_rename(&from, &to, flags)
        })();
        match renamed {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn open(&self, _req: &Request, inode: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let writing = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let opened = (|| {
            if writing {
                self.writable()?;
            }
            let (handle, file) = loop {
                // Open already: another handle on the same file.
                if let Some(held) = self.hold(inode.0, None) {
                    break held;
                }
                let path = self.state().path(inode)?;
                let child = self.child(&path)?.ok_or(Errno::ENOENT)?;
                if child.directory {
                    return Err(Errno::EISDIR);
                }
                let file = OpenFile::listed(inode.0, child);
                if let Some(held) = self.hold(inode.0, Some(file)) {
                    break held;
                }
            };
            if writing && flags.0 & libc::O_TRUNC != 0 {
                let mut file = lock(&file);
                file.dirty |= file.size != 0 || file.buffer.as_ref().is_some_and(|b| !b.is_empty());
                file.buffer = Some(Vec::new());
                file.size = 0;
                file.modified = SystemTime::now();
            }
            let (hash, buffered) = {
                let file = lock(&file);
                (file.hash.clone(), file.buffer.is_some())
            };
            let keep = self.state().keep_cache(inode.0, &hash, writing || buffered);
            let mut flags = if keep { FopenFlags::FOPEN_KEEP_CACHE } else { FopenFlags::empty() };
            if !writing {
                // Closing a descriptor that cannot write saves nothing: the
                // kernel need not ask (the writers' own closes save).
                flags |= FopenFlags::FOPEN_NOFLUSH;
            }
            Ok((handle, flags))
        })();
        match opened {
            Ok((handle, flags)) => reply.opened(FileHandle(handle), flags),
            Err(errno) => reply.error(errno),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let created = (|| {
            self.writable()?;
            let path = join(&self.state().path(parent)?, name_of(name)?);
            let inode = self.state().refer(&path);
            let now = SystemTime::now();
            let executable = mode & !umask & 0o111 != 0;
            let file = OpenFile {
                inode,
                version: 0,
                hash: String::new(),
                size: 0,
                modified: now,
                buffer: Some(Vec::new()),
                dirty: true,
                executable,
            };
            let (handle, _) = self.hold(inode, Some(file)).ok_or(Errno::EIO)?;
            self.state().keep_cache(inode, "", true);
            Ok((self.attr(inode, Shape::File { executable }, 0, now), handle))
        })();
        match created {
            Ok((attr, handle)) => {
                reply.created(&KERNEL_TTL, &attr, Generation(0), FileHandle(handle), FopenFlags::empty())
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &self,
        _req: &Request,
        inode: INodeNo,
        handle: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let read = (|| {
            let file = self.open_file(handle)?;
            let file = lock(&file);
            let slice = |bytes: &[u8]| {
                let start = (offset as usize).min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                bytes[start..end].to_vec()
            };
            if let Some(buffer) = &file.buffer {
                return Ok(slice(buffer));
            }
            let path = self.state().path(inode)?;
            let content = self.content(&path, file.version, &file.hash).map_err(|failure| failure.errno())?;
            Ok(slice(&content))
        })();
        match read {
            Ok(bytes) => reply.data(&bytes),
            Err(errno) => reply.error(errno),
        }
    }

    fn write(
        &self,
        _req: &Request,
        inode: INodeNo,
        handle: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = (|| {
            self.writable()?;
            let file = self.open_file(handle)?;
            let mut file = lock(&file);
            let path = self.state().path(inode)?;
            self.load(&path, &mut file).map_err(|failure| failure.errno())?;
            let buffer = file.buffer.get_or_insert_default();
            let start = usize::try_from(offset).map_err(|_| Errno::EFBIG)?;
            let end = start.checked_add(data.len()).ok_or(Errno::EFBIG)?;
            if buffer.len() < end {
                buffer.resize(end, 0);
            }
            buffer[start..end].copy_from_slice(data);
            file.size = buffer.len() as u64;
            file.dirty = true;
            file.modified = SystemTime::now();
            Ok(data.len() as u32)
        })();
        match written {
            Ok(size) => reply.written(size),
            Err(errno) => reply.error(errno),
        }
    }

    fn flush(&self, _req: &Request, _inode: INodeNo, handle: FileHandle, _owner: LockOwner, reply: ReplyEmpty) {
        let flushed = self.open_file(handle).and_then(|file| {
            let mut file = lock(&file);
            // A shell's `> file` closes a duplicate of the new descriptor
            // before anything is written: an empty file waits for the last
            // release, so that the write that follows makes the only version.
            if file.size == 0 {
                return Ok(());
            }
            self.save(&mut file)
        });
        match flushed {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn fsync(&self, _req: &Request, _inode: INodeNo, handle: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.open_file(handle).and_then(|file| self.save(&mut lock(&file))) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _inode: INodeNo,
        handle: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let last = {
            let mut state = self.state();
            let inode = state.handles.remove(&handle.0);
            inode.and_then(|inode| {
                let opened = state.files.get_mut(&inode)?;
                opened.handles -= 1;
                (opened.handles == 0).then(|| (inode, opened.file.clone()))
            })
        };
        let Some((inode, file)) = last else { return reply.ok() };
        // Whatever the flushes did not save is saved now, while the file is
        // still open to anyone who opens it meanwhile.
        let saved = {
            let mut file = lock(&file);
            let saved = self.save(&mut file);
            // The last chance to save failed (no room, no front): the bytes
            // go to the recovery folder rather than nowhere.
            if saved.is_err() && file.dirty {
                let path = self.state().paths.get(&inode).cloned().unwrap_or_default();
                match self.keep_draft(&path, file.buffer.as_deref().unwrap_or_default()) {
                    Ok(draft) => {
                        eprintln!("agentvfs mount: {path} was not saved; this copy is kept at {}", draft.display())
                    }
                    Err(error) => eprintln!(
                        "agentvfs mount: {path} was not saved, and the local copy could not be kept in {}: {error}",
                        self.options.recovery.display()
                    ),
                }
                file.dirty = false;
            }
            saved
        };
        let mut state = self.state();
        if state.files.get(&inode).is_some_and(|opened| opened.handles == 0) {
            state.files.remove(&inode);
            state.removed.remove(&inode);
            state.drop_if_unused(inode);
        }
        drop(state);
        match saved {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn opendir(&self, _req: &Request, inode: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let opened = (|| {
            let path = self.state().path(inode)?;
            let listing = self.listing(&path).map_err(|failure| failure.errno())?;
            let pending = self.created_in(&path, &listing);
            let mut state = self.state();
            let parent = if inode == INodeNo::ROOT { inode.0 } else { state.listed_inode(split(&path).0) };
            let mut entries =
                vec![(inode.0, FileType::Directory, ".".to_owned()), (parent, FileType::Directory, "..".to_owned())];
            for child in listing.iter() {
                let kind = if child.directory { FileType::Directory } else { FileType::RegularFile };
                entries.push((state.listed_inode(&join(&path, &child.name)), kind, child.name.clone()));
            }
            entries.extend(pending.into_iter().map(|(inode, name)| (inode, FileType::RegularFile, name)));
            let handle = state.handle();
            state.folders.insert(handle, Arc::new(entries));
            Ok(handle)
        })();
        match opened {
            Ok(handle) => reply.opened(FileHandle(handle), FopenFlags::empty()),
            Err(errno) => reply.error(errno),
        }
    }

    fn readdir(&self, _req: &Request, _inode: INodeNo, handle: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(entries) = self.state().folders.get(&handle.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        for (index, (inode, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*inode), index as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _inode: INodeNo, handle: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.state().folders.remove(&handle.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _inode: INodeNo, _handle: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.shared.settle() {
            Ok(()) => reply.ok(),
            Err(failure) => reply.error(failure.errno()),
        }
    }

    fn statfs(&self, _req: &Request, _inode: INodeNo, reply: ReplyStatfs) {
        // The space's quota is not a block device: plenty, never full.
        reply.statfs(1 << 28, 1 << 27, 1 << 27, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn symlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, _link: &std::path::Path, reply: ReplyEntry) {
        reply.error(Errno::ENOTSUP);
    }

    fn link(&self, _req: &Request, _inode: INodeNo, _parent: INodeNo, _name: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOTSUP);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn getxattr(&self, _req: &Request, _inode: INodeNo, _name: &OsStr, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOTSUP);
    }

    fn listxattr(&self, _req: &Request, _inode: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOTSUP);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _inode: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn removexattr(&self, _req: &Request, _inode: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOTSUP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inode_lives_while_the_kernel_or_an_open_file_holds_it() {
        let mut state = State::new("/w");
        let a = state.refer("/w/a");
        assert_eq!(state.refer("/w/a"), a);
        state.forget(a, 1);
        assert_eq!(state.path(INodeNo(a)).unwrap(), "/w/a");
        state.forget(a, 1);
        assert!(state.path(INodeNo(a)).is_err(), "forgotten twice, as often as given");
        assert!(!state.inodes.contains_key("/w/a"));
        // The path comes back as another inode.
        assert_ne!(state.refer("/w/a"), a);

        // Open, it stays until it is closed.
        let b = state.refer("/w/b");
        let file = OpenFile {
            inode: b,
            version: 0,
            hash: String::new(),
            size: 0,
            modified: SystemTime::UNIX_EPOCH,
            buffer: None,
            dirty: false,
            executable: false,
        };
        state.files.insert(b, Opened { file: Arc::new(Mutex::new(file)), handles: 1 });
        state.forget(b, 1);
        assert_eq!(state.path(INodeNo(b)).unwrap(), "/w/b");
        state.files.remove(&b);
        state.drop_if_unused(b);
        assert!(state.path(INodeNo(b)).is_err());

        // The root never goes; a listing maps nothing.
        state.forget(INodeNo::ROOT.0, 1);
        assert_eq!(state.path(INodeNo::ROOT).unwrap(), "/w");
        let listed = state.listed_inode("/w/c");
        assert!(state.path(INodeNo(listed)).is_err());
        assert_ne!(state.listed_inode("/w/c"), listed);
    }
}
