//! Truncation of a cached file: `truncate_setsize` + `truncate_pagecache` (`mm/truncate.c`)
//! through [`CachedFile::set_len`].
//!
//! `set_len` to a smaller size publishes the size, zeroes the cached tail of the page that
//! straddles it, cancels the dirtiness of the pages past it after waiting for their
//! writeback, removes them, and only then truncates the backing file: a `pwritev` of a
//! removed page that landed after the `ftruncate` would grow the file again with stale bytes.

use super::cow;
use super::error::CacheError;
use super::file::CachedFile;
use super::inode::Inode;
use super::sb::CacheInner;
use super::split::split_across;
use super::stats::Event;
use super::write::{lookup_stable, modify_cached, read_old_page};
use crate::mm::folio::{PAGE_SHIFT, PAGE_SIZE};
use crate::mm::sync::Ordering;
use crate::mm::writeback;

impl CachedFile {
    /// `ftruncate(2)` through the cache (`truncate_setsize`): shrinking drops the cached pages
    /// past the new end (dirty ones too: their data is cut) and zeroes the tail of the page
    /// that straddles it; growing makes the new bytes read as zeros. The backing file is
    /// resized at once.
    ///
    /// What concurrent readers see: the file before the call or after it, never bytes it cut
    /// (a read that misses while a shrink is under way waits for the backing file to be cut,
    /// as the kernel's fills wait on `invalidate_lock`; cached reads never wait). Once a sync
    /// returns after this call, the new size is on disk too (the backing's `fdatasync` covers
    /// a size change). A size past the file system's largest file size or the process's
    /// `RLIMIT_FSIZE` fails with [`CacheError::FileTooLarge`]; one past `off_t`'s range
    /// with [`CacheError::InvalidArgument`].
    pub fn set_len(&self, size: u64) -> Result<(), CacheError> {
        let m = self.writable_mapping()?;
        // A shrink cuts or zeroes the pages from the one holding the new end: none may be
        // latched.
        let _w = self.lock_for_write(&m, "set_len", |m| {
            (size < m.size()).then_some((size >> PAGE_SHIFT, u64::MAX))
        })?;
        let writer = m.writer_backing()?;
        let old = m.size();
        let c = &self.cache;
        if size > old {
            // `inode_newsize_ok`: the file system's and the process's limits, before anything.
            c.check_size_limit(&m, size)?;
        }
        // `filemap_invalidate_lock`, held until the backing is cut: a fill that read the
        // backing between the size's publication below and the cut could cache bytes being
        // cut, which a later grow would expose (and writeback save).
        let invalidate = (size < old).then(|| m.mapping.invalidate_lock.write());
        if size < old {
            // The pages cut or zeroed, for the file's live snapshots, before anything of them
            // changes (`cache/snapshot.rs`).
            capture_range(c, &m, size >> PAGE_SHIFT)?;
            // ORDERING: Release; pairs with `Inode::size`'s Acquire (module docs).
            m.mapping.size.store(size, Ordering::Release);
            if size % PAGE_SIZE as u64 != 0 {
                let tail = (size % PAGE_SIZE as u64) as usize;
                zero_cached_tail(c, &m, size >> PAGE_SHIFT, tail)?;
            }
            let cut = size.div_ceil(PAGE_SIZE as u64);
            // A large folio across the cut is split, so its pages below it stay cached.
            split_across(c, &m, cut)?;
            writeback::cancel_dirty_from(&m.mapping, cut, &c.dirty);
            let out = m.mapping.pages.truncate(cut, u64::MAX);
            c.counters.add(Event::Invalidated, out.pages_freed);
            let old_pages = old.div_ceil(PAGE_SIZE as u64);
            // Pinned folios were detached: they left the cache too.
            c.note_eviction(
                &m,
                cut..old_pages.max(cut),
                out.pages_freed + out.busy,
                super::budget::EvictionReason::Truncate,
            );
        }
        // ORDERING: SeqCst; revalidation's loads around its `fstat` pair with it.
        m.mapping.wb_seq.fetch_add(1, Ordering::SeqCst);
        writer.set_len(size).map_err(|e| m.write_error(size, e))?;
        m.mapping.disk_size.store(size, Ordering::Relaxed);
        drop(invalidate);
        if size > old {
            // ORDERING: Release, as above.
            m.mapping.size.store(size, Ordering::Release);
        }
        // The eviction listener runs with no lock held (`cache/budget.rs`).
        drop(_w);
        c.deliver();
        Ok(())
    }
}

/// Zeroes bytes `tail..` of page `index` if it is cached (the truncation's partial page),
/// with the write protocol; the page's dirtiness does not change (bytes past `i_size` are
/// never written back, and the file is cut by `ftruncate`).
fn zero_cached_tail(c: &CacheInner, m: &Inode, index: u64, tail: usize) -> Result<(), CacheError> {
    let zeros = [0u8; PAGE_SIZE];
    drop(modify_cached(c, m, index, tail, &zeros[tail..], None)?);
    Ok(())
}

/// Captures pages `first..` of `m` for every live snapshot that covers them, reading in the
/// ones not cached: a truncation to `first` pages (or into page `first`) does this before
/// it publishes the new size. The caller holds `i_rwsem`.
fn capture_range(c: &CacheInner, m: &Inode, first: u64) -> Result<(), CacheError> {
    if !m.snapshots.any() {
        return Ok(());
    }
    let end = m
        .snapshots
        .list
        .lock()
        .iter()
        .map(|s| s.pages)
        .max()
        .unwrap_or(0);
    let mut index = first;
    while index < end {
        if !cow::needs_old_page(&m.snapshots, index) {
            index += 1;
            continue;
        }
        match lookup_stable(c, m, index)? {
            Some(folio) => {
                cow::capture(c, &m.snapshots, &m.path, &folio, false)?;
                index += 1;
            }
            None => read_old_page(c, m, index)?,
        }
    }
    Ok(())
}
