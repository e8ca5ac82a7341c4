//! Inodes: one cached file per (device, inode number), outliving its handles.
//!
//! # The inode
//!
//! [`Inode`] is the product's half of a cached file: its identity ([`InodeKey`], the mapping
//! id), the path it was opened by, its users (`i_count`), the attributes revalidation
//! compares, `i_rwsem`, the size limit of its file system, and the table of pages latched by
//! writable guards ([`Latches`]). It owns its
//! [`AddressSpace`](crate::mm::filemap::AddressSpace) (the `mapping` field: index, `i_size`,
//! backing, writeback state, `invalidate_lock`), which is all readahead and writeback see of
//! the file.
//!
//! # What it models
//!
//! In Linux a file's cached pages belong to its inode's `address_space`, not to an open
//! file: `close(2)` drops a `struct file`, and the inode with its pages stays in the inode
//! cache after the last close (`iput_final` parks it on the superblock's LRU of unused
//! inodes) until memory pressure prunes it (`prune_icache_sb`, which evicts the inode and
//! its pages with `truncate_inode_pages_final`). A later `open` of the same file finds the
//! inode again (`iget_locked`, keyed by the inode number) and its pages with it.
//!
//! Here the inode cache is [`Icache`]: a map from [`InodeKey`] (the `st_dev`, `st_ino` pair
//! `fstat(2)` gives for the opened file) to the file's [`Inode`], and an LRU of the unused
//! ones (those no handle or owned guard uses), bounded by
//! [`Config::unused_inodes`](super::Config::unused_inodes). When a new unused inode pushes
//! the count over the bound, the least recently used one is evicted with its pages. The
//! pages of an unused inode are ordinary LRU folios meanwhile: reclaim may evict them one by
//! one, as it evicts any other cold folio.
//!
//! | kernel | here |
//! |---|---|
//! | `iget_locked` / `ilookup` on (`sb`, `i_ino`) | [`Icache::get_or_insert`] on (`st_dev`, `st_ino`) |
//! | `i_count`, `__iget`, `iput` | `Inode::users`, taken by every handle and owned guard; `CacheInner::iput` |
//! | `iput_final` -> `inode_add_lru` | the last user's `iput` parks the inode ([`Icache::park`]) |
//! | `prune_icache_sb` | [`Icache::park`] evicts the oldest unused inodes beyond the bound; [`FolioCache::drop_caches`](super::FolioCache::drop_caches) evicts every one; both skip inodes with dirty or writeback pages, or a writeback error no handle has been told of (it waits for the next opener) |
//! | `evict` -> `truncate_inode_pages_final` | dropping the evicted `Inode` truncates its index |
//! | `generic_drop_inode`: `iput_final` evicts at once when `i_nlink == 0` | the last user's `iput` asks the descriptor for its link count ([`Backing::links`](crate::io::Backing::links)); a deleted file is evicted at once ([`Icache::remove_unused`]), its dirty pages dropped without I/O, its descriptors closed, so its blocks are freed at the last close as the kernel frees them |
//!
//! # Revalidation at open (close-to-open)
//!
//! The cache cannot see writes that bypass it (another process, a tool, a file replaced by
//! `rename(2)`). It follows the rule NFS clients follow, *close-to-open consistency*: every
//! `open` looks at the file again.
//!
//! - A path that now names another file (replaced by a rename) has another (`st_dev`,
//!   `st_ino`) pair, so the open finds or creates that file's inode; handles still open on
//!   the old file keep reading the old one, as file descriptors do.
//! - An inode whose size or modification time changed since the cache last looked (a write
//!   that did not go through the cache) drops its cached pages and takes the new size. A
//!   handle can ask for the same check at any time ([`CachedFile::refresh`](super::CachedFile::refresh)).
//!
//! # Locking
//!
//! The inode cache's mutex guards the map and the LRU only: no system call runs under it
//! (the file is opened and `fstat`ed before, a replaced inode's pages are dropped after), so
//! one slow `open(2)` (a hung network file system) never stalls another thread's open. A
//! user count reaching zero is re-checked under the mutex (`atomic_dec_and_lock`), since an
//! `open` may have found the inode and taken a use between the decrement and the lock.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::Range;
use std::path::PathBuf;

use super::budget::{Eviction, EvictionReason};
use super::core::Core;
use super::error::CacheError;
use super::stats::Event;
use crate::io::{Backing, FileAttrs, RunError};
use crate::mm::filemap::AddressSpace;
use crate::mm::folio::PAGE_SIZE;
use crate::mm::sync::{Arc, AtomicU64, AtomicUsize, Mutex, Ordering};

/// The identity of a file: `st_dev` and `st_ino` from `fstat(2)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct InodeKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// One inode in the cache: its mapping, and its place in the unused LRU if no one uses it.
struct Slot {
    inode: Arc<Inode>,
    /// The LRU sequence number while the inode is unused (a key of `Icache::unused`).
    unused: Option<u64>,
}

/// The inode cache: every file opened by path, by identity, and the LRU of unused ones.
pub(crate) struct Icache {
    map: HashMap<InodeKey, Slot>,
    /// Unused inodes by the order they became unused (oldest first).
    unused: BTreeMap<u64, InodeKey>,
    next_seq: u64,
    /// How many unused inodes to keep.
    limit: usize,
}

impl Icache {
    pub(crate) fn new(limit: usize) -> Icache {
        Icache {
            map: HashMap::new(),
            unused: BTreeMap::new(),
            next_seq: 0,
            limit,
        }
    }

    /// `ilookup` + `__iget`: the cached inode of `key`, with one more user, taken off the
    /// unused LRU if it was there.
    pub(crate) fn get(&mut self, key: InodeKey) -> Option<Arc<Inode>> {
        let slot = self.map.get_mut(&key)?;
        if let Some(seq) = slot.unused.take() {
            self.unused.remove(&seq);
        }
        // ORDERING: Relaxed; a use is taken under the icache mutex, which orders it against
        // `park`'s re-check of the count (also under the mutex).
        slot.inode.users.fetch_add(1, Ordering::Relaxed);
        Some(slot.inode.clone())
    }

    /// `inode_insert5`: enters a new inode, which has its first user already.
    pub(crate) fn insert(&mut self, key: InodeKey, inode: Arc<Inode>) {
        let old = self.map.insert(
            key,
            Slot {
                inode,
                unused: None,
            },
        );
        debug_assert!(old.is_none(), "an inode is entered once");
    }

    /// `iput_final` -> `inode_add_lru`: the inode's last user left (its count read zero under
    /// the mutex). Parks it on the unused LRU and returns the inodes evicted to stay within
    /// the bound: the caller drops them (which truncates their pages) after unlocking.
    #[must_use = "evicted inodes must be dropped outside the inode cache's lock"]
    pub(crate) fn park(&mut self, key: InodeKey) -> Vec<Arc<Inode>> {
        let Some(slot) = self.map.get_mut(&key) else {
            return Vec::new();
        };
        // ORDERING: Relaxed; uses are taken under this mutex (`get`), and the decrement that
        // sent the caller here happened before it took the mutex.
        if slot.inode.users.load(Ordering::Relaxed) != 0 || slot.unused.is_some() {
            // Reopened meanwhile, or already parked by a racing last user.
            return Vec::new();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        slot.unused = Some(seq);
        self.unused.insert(seq, key);
        let mut evicted = Vec::new();
        while self.unused.len() > self.limit {
            // The oldest that can go: `prune_icache_sb` skips dirty inodes.
            let victim = self
                .unused
                .iter()
                .find(|(_, k)| self.map.get(k).is_some_and(|s| s.inode.evictable()))
                .map(|(&seq, &key)| (seq, key));
            let Some((seq, key)) = victim else { break };
            self.unused.remove(&seq);
            evicted.extend(self.map.remove(&key).map(|s| s.inode));
        }
        evicted
    }

    /// `iput_final` of a deleted file (`generic_drop_inode`: no name left): removes the
    /// inode instead of parking it, if no one took a use meanwhile (an open through another
    /// name it was given since). The caller drops it after unlocking.
    #[must_use = "an evicted inode must be dropped outside the inode cache's lock"]
    pub(crate) fn remove_unused(&mut self, key: InodeKey) -> Option<Arc<Inode>> {
        let slot = self.map.get(&key)?;
        // ORDERING: Relaxed, as in `park`.
        if slot.inode.users.load(Ordering::Relaxed) != 0 || slot.unused.is_some() {
            return None;
        }
        self.map.remove(&key).map(|s| s.inode)
    }

    /// `prune_icache_sb` to the end: removes every unused inode (the caller drops them after
    /// unlocking).
    #[must_use = "evicted inodes must be dropped outside the inode cache's lock"]
    pub(crate) fn evict_unused(&mut self) -> Vec<Arc<Inode>> {
        let victims: Vec<(u64, InodeKey)> = self
            .unused
            .iter()
            .filter(|(_, k)| self.map.get(k).is_some_and(|s| s.inode.evictable()))
            .map(|(&seq, &key)| (seq, key))
            .collect();
        victims
            .into_iter()
            .filter_map(|(seq, key)| {
                self.unused.remove(&seq);
                self.map.remove(&key).map(|s| s.inode)
            })
            .collect()
    }

    /// Unused inodes cached now.
    pub(crate) fn nr_unused(&self) -> usize {
        self.unused.len()
    }

    /// Inodes cached now, used or not.
    pub(crate) fn nr_inodes(&self) -> usize {
        self.map.len()
    }
}

/// One file's cached pages: the inode and its `address_space`.
///
/// Shared by every [`CachedFile`] handle of the file and kept by the cache's inode cache
/// ([`super::inode`]) after the last handle closes; its folios are freed (as
/// `truncate_inode_pages_final` does when an inode is evicted) when the inode cache evicts
/// it, or when the cache itself goes away.
pub(crate) struct Inode {
    /// The cache, for the counters an eviction folds in (weak: the inode cache holds
    /// mappings, so a strong reference would be a cycle).
    pub(crate) cache: std::sync::Weak<dyn std::ops::Deref<Target = Core> + Send + Sync>,
    /// Inode id stored in every folio of this file (`folio->mapping`).
    pub(crate) id: u64,
    /// The path given to the `open` that created the inode (error messages).
    pub(crate) path: PathBuf,
    /// The inode's identity when opened by path; `None` for a custom backing.
    pub(crate) key: Option<InodeKey>,
    /// `i_rwsem` taken exclusively: writes, `set_len` and appends of this file are serialised,
    /// as the kernel's buffered writes are; readers never take it.
    pub(crate) i_rwsem: Mutex<()>,
    /// The largest size the file system takes for this file (`s_maxbytes`): from the file
    /// system's type at open, lowered by a write the file system refused with `EFBIG`.
    pub(crate) max_bytes: AtomicU64,
    /// The backing file's size and mtime when the cache last looked, and `wb_seq` then
    /// (revalidation).
    pub(crate) attrs: Mutex<(FileAttrs, u64)>,
    /// `i_count`: open handles and owned guards of this file.
    pub(crate) users: AtomicUsize,
    /// Pages latched by [`FolioMut`](super::FolioMut) guards (`cache/latch.rs`).
    pub(crate) latches: Latches,
    /// The address space: the page index, `i_size`, the backing, writeback state,
    /// `invalidate_lock` (`inode->i_data`, [`AddressSpace`]).
    pub(crate) mapping: AddressSpace,
    /// Asynchronous readahead windows of this file in flight (`cache/async_ra.rs`).
    pub(crate) ra_inflight: Arc<super::async_ra::InflightRa>,
    /// The file's live snapshots (`cache/cow.rs`).
    pub(crate) snapshots: super::cow::Snapshots,
    /// The readahead window a new handle of this file starts with (`file_ra_state_init`:
    /// the cache's, or the device's for a file under direct I/O; see
    /// [`Config::readahead_pages`](crate::Config::readahead_pages)).
    pub(crate) ra_pages: usize,
    /// Buffered reads and writes pass `RWF_DONTCACHE` (`FileBacking::enable_dontcache`).
    pub(crate) dontcache: bool,
}

impl std::fmt::Debug for Inode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inode")
            .field("id", &self.id)
            .field("path", &self.path)
            .field("size", &self.size())
            .finish()
    }
}

impl Inode {
    /// `i_size_read`: the file size in bytes ([`AddressSpace::size`]).
    #[inline]
    pub(crate) fn size(&self) -> u64 {
        self.mapping.size()
    }

    /// Pages of the file (the last one may be partial).
    #[inline]
    pub(crate) fn nr_pages(&self) -> u64 {
        self.mapping.nr_pages()
    }

    /// Whether the inode cache may evict this inode: nothing left to write back, and no
    /// writeback error that no handle has been told of.
    pub(crate) fn evictable(&self) -> bool {
        !self.mapping.wb.has_unwritten() && !self.mapping.wb.err.unseen()
    }

    /// The `attrs` sequence of a look that overlapped a write of ours (never equal to
    /// `wb_seq`).
    const UNSETTLED: u64 = u64::MAX;

    /// Revalidation (close-to-open): looks at the backing file's size and mtime; if they
    /// changed since the cache last looked and none of the cache's own writes can explain it,
    /// a write bypassed the cache: drop every cached page and take the new size. Returns
    /// whether it did. Called with no cache-wide lock held.
    ///
    /// The cache's own writeback moves the file's mtime (and size) too. A change is taken as
    /// foreign only if the file has no dirty or writeback pages, and no write of ours was
    /// issued since the last look nor while this one looked (`wb_seq`); a foreign write that
    /// lands while the cache is writing the same file back goes unnoticed (documented at
    /// `FolioCache::open`).
    pub(crate) fn revalidate(&self, c: &Core) -> io::Result<bool> {
        // Writers hold `i_rwsem` from before they insert a page until it is dirty: holding it
        // here, the dirty check below cannot miss a write in progress.
        let _w = self.i_rwsem.lock();
        // ORDERING: SeqCst loads around the `fstat`, against the SeqCst increment issued
        // before each of our writes (`writeback::submit`, `set_len`): if the `fstat` sees a
        // write of ours, the second load sees its increment. Writeback tags its pages before
        // the increment, so a write in flight before the first load shows in `unwritten`.
        let seq0 = self.mapping.wb_seq.load(Ordering::SeqCst);
        // A latched page is a write in progress too: its commit will dirty it.
        let unwritten = self.mapping.wb.has_unwritten() || self.latches.any();
        let now = self.mapping.backing.attrs()?;
        let seq1 = self.mapping.wb_seq.load(Ordering::SeqCst);
        let mut seen = self.attrs.lock();
        let (was, was_seq) = *seen;
        // A look that overlapped a write of ours may have seen the file before the write
        // landed: remember it as unsettled, so the next look adopts whatever it sees too.
        let settled = !unwritten && seq0 == seq1;
        *seen = (now, if settled { seq1 } else { Self::UNSETTLED });
        if was == now || !settled || was_seq != seq1 {
            // Unchanged, or changed by our own writes (or our dirty pages are newer than
            // whatever the file holds): keep the pages.
            return Ok(false);
        }
        // Size first, then the pages, with no fill in between (`invalidate_lock`): a reader
        // that saw the old size refills from the backing, which already holds the new bytes.
        let _invalidate = self.mapping.invalidate_lock.write();
        self.mapping.size.store(now.size, Ordering::Release);
        self.mapping.disk_size.store(now.size, Ordering::Relaxed);
        let dropped = self.mapping.pages.truncate(0, u64::MAX);
        drop(seen);
        c.counters.add(Event::Invalidated, dropped.pages_freed);
        c.counters.inc(Event::Revalidations);
        c.note_eviction(
            self,
            0..was.size.div_ceil(PAGE_SIZE as u64),
            dropped.pages_freed + dropped.busy,
            EvictionReason::Invalidate,
        );
        Ok(true)
    }

    pub(super) fn io_error(&self, offset: u64, source: io::Error) -> CacheError {
        CacheError::Io {
            path: self.path.clone(),
            offset,
            source,
        }
    }

    /// The error of a fill whose run started at byte `offset`: an I/O error, or the file
    /// changed behind the cache.
    pub(super) fn fill_error(&self, offset: u64, e: RunError) -> CacheError {
        match e {
            RunError::Io(source) => self.io_error(offset, source),
            RunError::Changed {
                offset,
                expected_size,
                actual_size,
            } => CacheError::FileChanged {
                path: self.path.clone(),
                offset,
                expected_size,
                actual_size,
            },
        }
    }
}

impl Drop for Inode {
    fn drop(&mut self) {
        // The inode is evicted: drop every cached page (an owned guard's folio is detached
        // and freed by the guard) and fold the index's counters into the cache's totals.
        let dirty = self.mapping.wb.nr_dirty();
        let dropped = self.mapping.pages.truncate(0, u64::MAX);
        if let Some(c) = self.cache.upgrade() {
            // Dirty pages that go with the file take it off the dirty-file list.
            c.dirty.file_dropped(&self.mapping.wb);
            // Pages still dirty here could not be written back (a failure kept them dirty):
            // they leave the accounting with the file.
            c.dirty.unreserve(dirty);
            c.counters.add(Event::Invalidated, dropped.pages_freed);
            c.retire_index_stats(self.mapping.pages.stats());
            c.note_eviction(
                self,
                0..self.nr_pages(),
                // Pinned folios were detached: they left the cache too.
                dropped.pages_freed + dropped.busy,
                EvictionReason::InodeEviction,
            );
        }
    }
}

impl Inode {
    /// The backing writeback writes to.
    pub(super) fn writer_backing(&self) -> Result<Arc<dyn Backing>, CacheError> {
        self.mapping
            .writer()
            .ok_or_else(|| CacheError::NotWritable {
                path: self.path.clone(),
            })
    }

    /// Refuses a call that would wait for the commit of a page of `first..=last` latched in
    /// place ([`InPlaceFolioMut`](super::InPlaceFolioMut)) by a guard the calling thread
    /// made: a read, a sync or a snapshot would wait for itself. (Not by handle: an engine's
    /// threads share one, and another thread's guard commits on its own.)
    pub(super) fn refuse_own_latch(
        &self,
        first: u64,
        last: u64,
        what: &str,
    ) -> Result<(), CacheError> {
        match self.latches.mine_in_place(first, last) {
            Some(index) => Err(self.latched_by_me(index, what)),
            None => Ok(()),
        }
    }

    /// The error for a call that would wait for a latch ([`FolioMut`](super::FolioMut),
    /// [`InPlaceFolioMut`](super::InPlaceFolioMut)) its caller holds on page `index`.
    pub(super) fn latched_by_me(&self, index: u64, what: &str) -> CacheError {
        CacheError::InvalidArgument {
            what: format!(
                "{what} of {} would wait for page {index}, latched by a FolioMut of this handle or \
                 made by this thread: use the guard, or commit it first",
                self.path.display()
            ),
        }
    }

    pub(super) fn write_error(&self, offset: u64, source: io::Error) -> CacheError {
        CacheError::Writeback {
            path: self.path.clone(),
            source: io::Error::new(source.kind(), format!("at byte {offset}: {source}")),
        }
    }
}
/// The pages of one file latched by [`FolioMut`] guards: a logical lock per page, kept apart
/// from the folio lock, owned by the guard (not by a thread: a guard may move to another
/// thread, as it is `Send`).
///
/// The kernel never returns to userspace with a folio locked, and its lock order puts folio
/// locks inside `i_rwsem`. A guard is held across calls of its owner's choosing, so it must
/// not hold a folio lock: its owner could then write another page of the file (and be
/// throttled into writing back the page it holds), sync the file, or wait for `i_rwsem` held
/// by a writer that waits for the guard's page. So a guard holds a reference and an entry
/// here instead. Entries are added under the file's `i_rwsem` ([`CachedFile::get_folio_mut`]),
/// and every writer looks here under `i_rwsem` before it writes a page. A page latched through
/// the same handle, or by a guard the calling thread made, is an error: whoever holds the
/// handle holds the guard its borrow ties to it, so the call would (or, for a guard since moved
/// to another thread, may) wait for itself. Any other latched page is waited for with
/// `i_rwsem` released.
///
/// A guard that changes a private copy ([`FolioMut`]) is invisible to readers, writeback,
/// syncs and reclaim: the cached page never changes under it. One that updates the cached
/// page in place ([`InPlaceFolioMut`](super::InPlaceFolioMut), `PG_LATCHED` on the folio)
/// is not: readers of the page wait for its commit (a read by the thread that made it is an
/// error: it would wait for itself), a background writeback pass skips the page, an integrity
/// sync waits for it (a sync by the thread that made the guard is an error), and a snapshot waits
/// for every in-place latch of the file to commit (it could not keep the page's bytes
/// otherwise).
pub(crate) struct Latches {
    /// Entries in `held`, read without the mutex on every write: zero almost always.
    nr: AtomicUsize,
    /// Who latched which page; a few entries at most.
    held: crate::mm::sync::Mutex<Vec<Latch>>,
    released: crate::mm::sync::Condvar,
    /// Threads waiting on `released`: changed and read only under `held`'s mutex, so a
    /// release that reads 0 there has no one to wake (and skips the futex call).
    waiters: AtomicUsize,
    /// Snapshots waiting for the in-place latches to commit (`lock_for_snapshot`).
    snapshots_waiting: AtomicUsize,
}

impl Latches {
    pub(crate) fn new() -> Latches {
        Latches {
            nr: AtomicUsize::new(0),
            held: crate::mm::sync::Mutex::new(Vec::new()),
            released: crate::mm::sync::Condvar::new(),
            waiters: AtomicUsize::new(0),
            snapshots_waiting: AtomicUsize::new(0),
        }
    }

    /// A latched page in `first..=last` (one the caller would wait for itself on first: made
    /// through `handle` or by the calling thread). The caller holds `i_rwsem`, under which
    /// latches are added, so the answer stays true until it lets go (one may be released
    /// meanwhile).
    pub(super) fn find(&self, first: u64, last: u64, handle: u64) -> Option<(u64, bool)> {
        // ORDERING: Relaxed; entries are added under `i_rwsem`, which the caller holds, so
        // every entry added before is visible; a stale non-zero only costs the mutex.
        if self.nr.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let me = this_thread();
        let held = self.held.lock();
        let mut found = None;
        for l in held.iter() {
            if !l.overlaps(first, last) {
                continue;
            }
            let mine = l.handle == handle || l.thread == me;
            if found.is_none() || mine {
                found = Some((l.index, mine));
            }
        }
        found
    }

    /// Whether any page of the file is latched (revalidation counts a latch as a write in
    /// progress). The caller holds `i_rwsem`.
    pub(crate) fn any(&self) -> bool {
        // ORDERING: Relaxed, as in `find`.
        self.nr.load(Ordering::Relaxed) != 0
    }

    /// Latches pages `index..=last` (one page, or a block) for a guard made through `handle`
    /// by the calling thread, updating the cached folio `in_place` or a copy; the caller holds
    /// `i_rwsem` and found them free.
    pub(super) fn add(&self, index: u64, last: u64, handle: u64, in_place: bool) {
        let mut held = self.held.lock();
        held.push(Latch {
            index,
            last,
            handle,
            thread: this_thread(),
            in_place,
        });
        self.nr.store(held.len(), Ordering::Relaxed);
    }

    /// A page of `first..=last` latched in place by a guard the calling thread made: a read
    /// of it, a sync or a snapshot would wait for it (`Inode::refuse_own_latch`).
    pub(super) fn mine_in_place(&self, first: u64, last: u64) -> Option<u64> {
        // ORDERING: Relaxed; the caller's own entries are visible to it.
        if self.nr.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let me = this_thread();
        self.held
            .lock()
            .iter()
            .find(|l| l.in_place && l.overlaps(first, last) && l.thread == me)
            .map(|l| l.index)
    }

    /// Whether a page of the file is latched in place, or a block latched at all: what a
    /// snapshot waits for.
    pub(super) fn any_in_place(&self) -> bool {
        // ORDERING: Relaxed, as in `find` (the callers hold `i_rwsem`).
        self.nr.load(Ordering::Relaxed) != 0
            && self.held.lock().iter().any(Latch::holds_off_snapshots)
    }

    /// Takes `i_rwsem` once no page of the file is latched in place, for a snapshot. The
    /// wait happens with `i_rwsem` released (a latch's holder may be about to write another
    /// page, which takes it); meanwhile new latches change copies
    /// ([`Latches::snapshot_waiting`]), so the ones in place drain.
    pub(super) fn lock_for_snapshot<'a>(
        &self,
        i_rwsem: &'a crate::mm::sync::Mutex<()>,
    ) -> crate::mm::sync::MutexGuard<'a, ()> {
        // ORDERING: Relaxed; read under `i_rwsem` by latches, which the loop below takes
        // after the increment (the mutex orders them).
        self.snapshots_waiting.fetch_add(1, Ordering::Relaxed);
        let w = loop {
            let w = i_rwsem.lock();
            // Entries are added under `i_rwsem`, which we hold: none is missed.
            if !self.any_in_place() {
                break w;
            }
            drop(w);
            self.wait_while(|h| h.iter().any(Latch::holds_off_snapshots));
        };
        // Under the mutex block latches wait on (`wait_for_snapshots`), then a wake-up: a
        // block latch that saw a snapshot waiting sleeps there until none does.
        let held = self.held.lock();
        self.snapshots_waiting.fetch_sub(1, Ordering::Relaxed);
        // ORDERING: Relaxed; `waiters` changes only under this mutex, which we hold.
        let wake = self.waiters.load(Ordering::Relaxed) != 0;
        drop(held);
        if wake {
            self.released.notify_all();
        }
        w
    }

    /// Sleeps while a snapshot waits for the file's latches (a block latch, which the
    /// snapshot waits for too, must not start meanwhile, or a stream of them could hold the
    /// snapshot off). The caller holds no `i_rwsem`.
    pub(super) fn wait_for_snapshots(&self) {
        self.wait_while(|_| self.snapshots_waiting.load(Ordering::Relaxed) != 0);
    }

    /// Whether a snapshot waits for the file's in-place latches: a new latch then changes a
    /// copy. The caller holds `i_rwsem`.
    pub(super) fn snapshot_waiting(&self) -> bool {
        // ORDERING: Relaxed; see `lock_for_snapshot`.
        self.snapshots_waiting.load(Ordering::Relaxed) != 0
    }

    /// Releases the latch starting at `index` and wakes the writers waiting for it.
    pub(super) fn remove(&self, index: u64) {
        let mut held = self.held.lock();
        if let Some(i) = held.iter().position(|l| l.index == index) {
            held.swap_remove(i);
        }
        self.nr.store(held.len(), Ordering::Relaxed);
        // ORDERING: Relaxed; `waiters` changes only under this mutex, which we hold.
        let wake = self.waiters.load(Ordering::Relaxed) != 0;
        drop(held);
        if wake {
            self.released.notify_all();
        }
    }

    /// Sleeps until page `index` is not latched (the caller holds no `i_rwsem`).
    pub(super) fn wait_released(&self, index: u64) {
        self.wait_while(|h| h.iter().any(|l| l.overlaps(index, index)));
    }

    /// Sleeps on `released` while `cond` holds of the latches, counted in `waiters` (under
    /// the mutex, before the wait releases it: a release after that sees the count).
    fn wait_while(&self, cond: impl FnMut(&mut Vec<Latch>) -> bool) {
        let held = self.held.lock();
        // ORDERING: Relaxed, under the mutex (see `remove`).
        self.waiters.fetch_add(1, Ordering::Relaxed);
        let held = self.released.wait_while(held, cond);
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        drop(held);
    }
}

/// The calling thread's id, from a thread-local copy (`thread::current` clones an `Arc` on
/// every call: two atomics on a latch's fast path).
fn this_thread() -> std::thread::ThreadId {
    thread_local! {
        static ME: std::thread::ThreadId = std::thread::current().id();
    }
    ME.with(|me| *me)
}

/// One latched page or block: its pages, the handle its guard borrows (`CachedFile::id`),
/// and the thread that made the guard.
struct Latch {
    index: u64,
    last: u64,
    handle: u64,
    thread: std::thread::ThreadId,
    /// The guard updates the cached page itself (`PG_LATCHED`), not a copy.
    in_place: bool,
}

impl Latch {
    fn overlaps(&self, first: u64, last: u64) -> bool {
        self.index <= last && first <= self.last
    }

    /// A snapshot waits for this latch to commit: it updates the cached folio in place (the
    /// bytes it overwrites exist nowhere else), or it is a block's (a snapshot keeps pages,
    /// and could not capture the block's pages without splitting the folio the latch
    /// holds).
    fn holds_off_snapshots(&self) -> bool {
        self.in_place || self.last > self.index
    }
}

/// The budget's side of an inode: the eviction listener's record names the file.
impl Core {
    /// An eviction of `mapping`'s pages `pages` (`nr_pages` of them freed) for `reason`.
    pub(crate) fn note_eviction(
        &self,
        m: &Inode,
        pages: Range<u64>,
        nr_pages: u64,
        reason: EvictionReason,
    ) {
        if !self.budget.listening() {
            return;
        }
        self.budget.note(Eviction {
            path: m.path.clone(),
            dev_ino: m.key.map(|k| (k.dev, k.ino)),
            pages,
            nr_pages,
            reason,
        });
    }
}
