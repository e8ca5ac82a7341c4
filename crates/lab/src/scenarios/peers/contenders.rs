//! The contenders of `peers`: one [`Reader`] per way a storage engine could cache its blocks.
//!
//! | variant | what a read of block `b` does | budget | a miss is |
//! |---|---|---|---|
//! | `foliocache` | `CachedFile::read_at` of the block into the thread's buffer (a copy); readahead off by default (`--ra-pages`), as storage engines ask for random block reads | the budget | a lookup that started a read (the cache's `misses` counter) |
//! | `foliocache-pinned` | `CachedFile::get_range`: the block pinned, read in place, no copy (one folio holds an aligned block) | the budget | as above |
//! | `quick_cache` | `get_or_insert_with(b)`: a hit clones the cached `Arc<[u8]>` (no copy); a miss `pread`s the block into a new one | the budget, in blocks | the loader ran |
//! | `quick_cache-copy` | as `quick_cache`, then the block is copied into the thread's buffer, as `read_at` copies it | the budget, in blocks | the loader ran |
//! | `moka` | `try_get_with(b)`: as `quick_cache` | the budget, in blocks | the loader ran |
//! | `kernel-pread` | `pread(2)` of the block into the thread's buffer | **the machine's memory** (the kernel page cache) | a block read from storage (`/proc/self/io` `read_bytes` / 4096) |
//! | `mmap` | a slice of a shared read-only mapping of the file | **the machine's memory** | a major fault (`getrusage`) |
//!
//! The Rust caches are used the way their documentation shows: values are reference-counted
//! byte blocks, returned by clone (zero-copy), filled on a miss by one positional read of the
//! same file, with their single-flight loaders (concurrent misses on one block read it once).
//! Their budgets count block data only, like foliocache's; their per-entry metadata is on
//! top (the RSS column shows what each really used).
//!
//! **Like for like.** A contender either hands out the cached bytes in place (zero-copy:
//! `foliocache-pinned`, `quick_cache`, `moka`, `mmap`) or copies them into the caller's
//! buffer (`foliocache`, `quick_cache-copy`, `kernel-pread`); [`Kind::zero_copy`] says which,
//! and the scenario compares each foliocache read only with the peers that do the same work.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;

use foliocache::mm::lru::LruConfig;
use foliocache::mm::Experiment;
use foliocache::{CacheError, CachedFile, Config, FolioCache};

use super::workload::block;

/// A contender's name and what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// foliocache, `read_at` (copy).
    Foliocache,
    /// foliocache, pinned folio (zero-copy).
    FoliocachePinned,
    /// quick_cache (crates.io), `Arc<[u8]>` blocks.
    QuickCache,
    /// quick_cache, each block copied out into the caller's buffer (as `read_at` does).
    QuickCacheCopy,
    /// moka (crates.io, `sync`), `Arc<[u8]>` blocks.
    Moka,
    /// The kernel page cache through `pread(2)`.
    KernelPread,
    /// The kernel page cache through a shared mapping.
    Mmap,
}

impl Kind {
    /// Every contender, in the order they are interleaved.
    pub const ALL: [Kind; 7] = [
        Kind::Foliocache,
        Kind::FoliocachePinned,
        Kind::QuickCache,
        Kind::QuickCacheCopy,
        Kind::Moka,
        Kind::KernelPread,
        Kind::Mmap,
    ];

    /// The stable variant name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Foliocache => "foliocache",
            Kind::FoliocachePinned => "foliocache-pinned",
            Kind::QuickCache => "quick_cache",
            Kind::QuickCacheCopy => "quick_cache-copy",
            Kind::Moka => "moka",
            Kind::KernelPread => "kernel-pread",
            Kind::Mmap => "mmap",
        }
    }

    /// The contender called `name`.
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether its budget is the whole machine's memory (the kernel's page cache).
    pub fn machine_budget(self) -> bool {
        matches!(self, Kind::KernelPread | Kind::Mmap)
    }

    /// Whether a read hands out the cached bytes in place (no copy into the caller's buffer).
    pub fn zero_copy(self) -> bool {
        !matches!(
            self,
            Kind::Foliocache | Kind::QuickCacheCopy | Kind::KernelPread
        )
    }

    /// The foliocache contender that does the same work per read as this one: the pinned,
    /// zero-copy read for a zero-copy peer, the copying `read_at` for a copying one.
    pub fn like_for_like(self) -> Kind {
        if self.zero_copy() {
            Kind::FoliocachePinned
        } else {
            Kind::Foliocache
        }
    }
}

/// One way of reading blocks, shared by the worker threads.
pub trait Reader: Send + Sync + 'static {
    /// Per-thread state (a buffer, a handle, a miss count).
    type Local;

    /// The calling thread's state.
    fn local(&self) -> io::Result<Self::Local>;

    /// Reads block `b` and hands its bytes to `f` (in place or from the thread's buffer).
    fn with_block<R>(
        &self,
        local: &mut Self::Local,
        b: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String>;

    /// Misses counted by the workers themselves (summed over threads by the caller).
    fn local_misses(_local: &Self::Local) -> u64 {
        0
    }

    /// A running miss count kept outside the workers (cache statistics, process counters),
    /// when the workers do not count; read before and after a phase.
    fn miss_counter(&self) -> Option<u64> {
        None
    }

    /// Counters of the system under test (`/proc/vmstat` style), when it has them.
    fn stats(&self) -> Option<serde_json::Value> {
        None
    }
}

/// A block-sized buffer, for the copying contenders.
pub struct Buf(pub Box<[u8]>);

impl Buf {
    /// A zeroed buffer of one block on the heap.
    pub fn boxed() -> Box<Buf> {
        Box::new(Buf(vec![0; block()].into_boxed_slice()))
    }
}

fn load_block(file: &File, b: u32) -> io::Result<Arc<[u8]>> {
    let mut v: Arc<[u8]> = vec![0u8; block()].into();
    let dst = Arc::get_mut(&mut v).expect("a new Arc is unique");
    file.read_exact_at(dst, u64::from(b) * block() as u64)?;
    Ok(v)
}

/// A thread's miss count, for the contenders whose loaders run on the caller.
#[derive(Debug, Default)]
pub struct Misses(u64);

/// `quick_cache::sync::Cache<u32, Arc<[u8]>>` of `budget` blocks.
pub struct QuickCache {
    cache: quick_cache::sync::Cache<u32, Arc<[u8]>>,
    file: Arc<File>,
}

impl QuickCache {
    /// A cache of `blocks` blocks over `file`.
    pub fn new(file: Arc<File>, blocks: usize) -> QuickCache {
        QuickCache {
            cache: quick_cache::sync::Cache::new(blocks),
            file,
        }
    }
}

impl Reader for QuickCache {
    type Local = Misses;

    fn local(&self) -> io::Result<Misses> {
        Ok(Misses::default())
    }

    #[inline]
    fn with_block<R>(
        &self,
        l: &mut Misses,
        b: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        let v = self
            .cache
            .get_or_insert_with(&b, || {
                l.0 += 1;
                load_block(&self.file, b)
            })
            .map_err(|e| format!("quick_cache: reading block {b}: {e}"))?;
        Ok(f(&v))
    }

    fn local_misses(l: &Misses) -> u64 {
        l.0
    }
}

/// [`QuickCache`] whose reads copy the block into the thread's buffer: the copying peer of
/// `foliocache`'s `read_at`.
pub struct QuickCacheCopy(pub QuickCache);

impl Reader for QuickCacheCopy {
    type Local = (Misses, Box<Buf>);

    fn local(&self) -> io::Result<Self::Local> {
        Ok((Misses::default(), Buf::boxed()))
    }

    #[inline]
    fn with_block<R>(
        &self,
        (l, buf): &mut Self::Local,
        b: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        self.0
            .with_block(l, b, |data| buf.0.copy_from_slice(data))?;
        Ok(f(&buf.0))
    }

    fn local_misses((l, _): &Self::Local) -> u64 {
        l.0
    }
}

/// `moka::sync::Cache<u32, Arc<[u8]>>` of `budget` blocks.
pub struct Moka {
    cache: moka::sync::Cache<u32, Arc<[u8]>>,
    file: Arc<File>,
}

impl Moka {
    /// A cache of `blocks` blocks over `file`.
    pub fn new(file: Arc<File>, blocks: usize) -> Moka {
        Moka {
            cache: moka::sync::Cache::builder()
                .max_capacity(blocks as u64)
                .build(),
            file,
        }
    }
}

impl Reader for Moka {
    type Local = Misses;

    fn local(&self) -> io::Result<Misses> {
        Ok(Misses::default())
    }

    #[inline]
    fn with_block<R>(
        &self,
        l: &mut Misses,
        b: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        let v = self
            .cache
            .try_get_with(b, || {
                l.0 += 1;
                load_block(&self.file, b)
            })
            .map_err(|e| format!("moka: reading block {b}: {e}"))?;
        Ok(f(&v))
    }

    fn local_misses(l: &Misses) -> u64 {
        l.0
    }
}

/// Bytes this process caused to be read from storage (`/proc/self/io` `read_bytes`).
pub fn storage_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `pread(2)` on the file: the kernel's page cache, whose budget is the machine's memory.
pub struct KernelPread {
    file: Arc<File>,
}

impl KernelPread {
    /// Reads of `file`.
    pub fn new(file: Arc<File>) -> KernelPread {
        KernelPread { file }
    }
}

impl Reader for KernelPread {
    type Local = Box<Buf>;

    fn local(&self) -> io::Result<Box<Buf>> {
        Ok(Buf::boxed())
    }

    #[inline]
    fn with_block<R>(
        &self,
        buf: &mut Box<Buf>,
        b: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        self.file
            .read_exact_at(&mut buf.0, u64::from(b) * block() as u64)
            .map_err(|e| format!("pread of block {b}: {e}"))?;
        Ok(f(&buf.0))
    }

    fn miss_counter(&self) -> Option<u64> {
        Some(storage_read_bytes() / block() as u64)
    }
}

/// Major page faults of this process so far (`getrusage(RUSAGE_SELF)`).
pub fn major_faults() -> u64 {
    // SAFETY: `rusage` is plain data; zeroed is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
        ru.ru_majflt as u64
    } else {
        0
    }
}

/// A shared, read-only mapping of the whole file.
pub struct Mmap {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only and lives until `drop`; sharing its address between
// threads only shares reads of immutable memory.
unsafe impl Send for Mmap {}
// SAFETY: as above, `&Mmap` only allows reads.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps the first `blocks` blocks of `file`.
    pub fn new(file: &File, blocks: u64) -> io::Result<Mmap> {
        let len = blocks as usize * block();
        // SAFETY: a fresh read-only shared mapping of an open file descriptor; the kernel
        // picks the address; the result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: p as *const u8,
            len,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

impl Reader for Mmap {
    type Local = ();

    fn local(&self) -> io::Result<()> {
        Ok(())
    }

    #[inline]
    fn with_block<R>(&self, _: &mut (), b: u32, f: impl FnOnce(&[u8]) -> R) -> Result<R, String> {
        let bytes = block();
        let at = b as usize * bytes;
        if at + bytes > self.len {
            return Err(format!("mmap: block {b} is past the mapping"));
        }
        // SAFETY: `at + bytes <= len`, inside the live read-only mapping; the file is not
        // truncated while the lab runs (a truncation would raise SIGBUS, not read garbage).
        let data = unsafe { std::slice::from_raw_parts(self.ptr.add(at), bytes) };
        Ok(f(data))
    }

    fn miss_counter(&self) -> Option<u64> {
        Some(major_faults())
    }
}

/// foliocache: one [`FolioCache`] of the budget, the file opened once; every worker thread
/// opens its own handle (as it would its own file descriptor).
pub struct Foliocache {
    cache: FolioCache,
    file: CachedFile,
    pinned: bool,
}

impl Foliocache {
    /// A cache of `budget_bytes` over `path`, read by copy (`read_at`) or in place
    /// (`get_range`, `pinned`): [`Config::block_cache`], buffered I/O (as every contender's
    /// misses read the kernel's warm page cache), with a readahead window of `ra_pages`
    /// (0: off, the block cache's) and the LRU policy `lru` (the block cache's unless the
    /// command line changed it).
    pub fn new(
        path: &std::path::Path,
        budget_bytes: usize,
        ra_pages: usize,
        lru: LruConfig,
        pinned: bool,
    ) -> Result<Foliocache, CacheError> {
        let cache = FolioCache::new(
            block_cache_config(budget_bytes, ra_pages, lru)
                // Like for like: every other contender's miss is a buffered `pread` from the
                // kernel's warm page cache, so foliocache's is too (the `io` scenario
                // measures reads from the device).
                .direct_io(foliocache::DirectIo::Off),
        )?;
        let file = cache.open(path)?;
        Ok(Foliocache::with_cache(cache, file, pinned))
    }

    /// The contender over a cache already built and its open `file` (the async mode's
    /// resident cache, filled once and read by every resident measurement).
    pub fn with_cache(cache: FolioCache, file: CachedFile, pinned: bool) -> Foliocache {
        Foliocache {
            cache,
            file,
            pinned,
        }
    }
}

/// The foliocache contenders' configuration: [`Config::block_cache`] of `budget_bytes`, a
/// readahead window of `ra_pages` (0: off, the block cache's) and the LRU policy `lru` (the
/// block cache's unless the command line changed it). The caller chooses the I/O.
pub fn block_cache_config(budget_bytes: usize, ra_pages: usize, lru: LruConfig) -> Config {
    Config::block_cache(budget_bytes)
        .readahead_pages(ra_pages)
        .workingset(lru.workingset)
        .inactive_ratio(lru.inactive_ratio)
        .lru_policy(lru.policy)
        .experiment(Experiment::new().active_second_chance(lru.active_second_chance))
}

impl Reader for Foliocache {
    type Local = (CachedFile, Box<Buf>);

    fn local(&self) -> io::Result<Self::Local> {
        Ok((self.file.reopen(), Buf::boxed()))
    }

    #[inline]
    fn with_block<R>(
        &self,
        (file, buf): &mut Self::Local,
        b: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        let bytes = block();
        let off = u64::from(b) * bytes as u64;
        if self.pinned {
            let range = file
                .get_range(off, bytes)
                .map_err(|e| format!("get_range of block {b}: {e}"))?;
            // One folio holds an aligned block (large folios); otherwise, rarely (a block
            // whose pages were cached apart), gather its slices into the thread's buffer.
            match range.as_slice() {
                Some(s) => Ok(f(s)),
                None => {
                    range.copy_to(&mut buf.0);
                    Ok(f(&buf.0))
                }
            }
        } else {
            file.read_exact_at(&mut buf.0, off)
                .map_err(|e| format!("read_at of block {b}: {e}"))?;
            Ok(f(&buf.0))
        }
    }

    fn miss_counter(&self) -> Option<u64> {
        Some(self.cache.stats().misses)
    }

    fn stats(&self) -> Option<serde_json::Value> {
        Some(super::super::files::cache_stats_json(&self.cache))
    }
}
