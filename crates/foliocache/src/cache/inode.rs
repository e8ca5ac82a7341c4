//! Inodes: one cached file per (device, inode number), outliving its handles.
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
//! `fstat(2)` gives for the opened file) to the file's [`Mapping`], and an LRU of the unused
//! ones (those no handle or owned guard uses), bounded by
//! [`Config::unused_inodes`](super::Config::unused_inodes). When a new unused inode pushes
//! the count over the bound, the least recently used one is evicted with its pages. The
//! pages of an unused inode are ordinary LRU folios meanwhile: reclaim may evict them one by
//! one, as it evicts any other cold folio.
//!
//! | kernel | here |
//! |---|---|
//! | `iget_locked` / `ilookup` on (`sb`, `i_ino`) | [`Icache::get_or_insert`] on (`st_dev`, `st_ino`) |
//! | `i_count`, `__iget`, `iput` | `Mapping::users`, taken by every handle and owned guard; `CacheInner::iput` |
//! | `iput_final` -> `inode_add_lru` | the last user's `iput` parks the inode ([`Icache::park`]) |
//! | `prune_icache_sb` | [`Icache::park`] evicts the oldest unused inodes beyond the bound; [`FolioCache::drop_caches`](super::FolioCache::drop_caches) evicts every one; both skip inodes with dirty or writeback pages, or a writeback error no handle has been told of (it waits for the next opener) |
//! | `evict` -> `truncate_inode_pages_final` | dropping the evicted `Mapping` truncates its index |
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

use super::file::Mapping;
use crate::mm::sync::{Arc, Ordering};

/// The identity of a file: `st_dev` and `st_ino` from `fstat(2)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct InodeKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// One inode in the cache: its mapping, and its place in the unused LRU if no one uses it.
struct Slot {
    inode: Arc<Mapping>,
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
    pub(crate) fn get(&mut self, key: InodeKey) -> Option<Arc<Mapping>> {
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
    pub(crate) fn insert(&mut self, key: InodeKey, inode: Arc<Mapping>) {
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
    pub(crate) fn park(&mut self, key: InodeKey) -> Vec<Arc<Mapping>> {
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
    pub(crate) fn remove_unused(&mut self, key: InodeKey) -> Option<Arc<Mapping>> {
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
    pub(crate) fn evict_unused(&mut self) -> Vec<Arc<Mapping>> {
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
