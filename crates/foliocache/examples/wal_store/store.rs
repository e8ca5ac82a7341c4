//! A page store with a write-ahead log, on foliocache: the smallest engine that uses the
//! cache as its buffer pool.
//!
//! - The data file is a fixed number of pages of 4 KiB (or, [`Store::open_paged`], 8 to 64
//!   KiB); each page's first 8 bytes hold the log sequence number of the last change applied
//!   to it (the page LSN).
//! - An update latches its page in place ([`CachedFile::get_folio_mut_in_place`]; a larger
//!   page as one block, [`CachedFile::get_block_mut_in_place`]), appends a log record
//!   (sequence number, page, offset, bytes, checksum) to the log's buffer, changes the cached
//!   page itself (no copy) and tags it with the record's number
//!   ([`InPlaceFolioMut::set_lsn`](foliocache::InPlaceFolioMut::set_lsn)). The change is in
//!   the cache before it is committed: the cache's write-ahead rule keeps the page out of
//!   the file until the log holds the record durably, and a block reaches the file whole or
//!   not at all as far as the cache is concerned (one folio, one write).
//! - [`Store::commit`] writes the log's buffer and syncs the log (a group commit) and tells
//!   the cache ([`FolioCache::log_durable`]). When the cache wants to write a page whose
//!   record is not durable yet (a sync, the flusher, memory pressure), it calls the log's
//!   [`WriteAheadLog::flush_log`], which does the same.
//! - [`Store::open`] replays the log: every valid record newer than its page's LSN is applied
//!   again (ARIES's redo). [`Store::checkpoint`] writes every page back
//!   ([`FolioCache::checkpoint`]) and then replaces the log by one that holds only a
//!   checkpoint record (its sequence number, so numbering goes on from there after a
//!   restart).
//!
//! Lock order: a page latch, then the log's mutex. The log's mutex is never held while the
//! cache is written, so writeback calling `flush_log` cannot wait for this thread.

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use foliocache::{CachedFile, Config, FolioCache, OpenOptions, WriteAheadLog};

/// Bytes of a page (of [`Store::open`]'s stores).
pub const PAGE: usize = foliocache::PAGE_SIZE;
/// Bytes at the start of each page that hold its LSN.
pub const HEADER: usize = 8;

/// The log: its file, the records not yet written to it, and how far it is durable.
struct Log {
    inner: Mutex<LogInner>,
}

struct LogInner {
    file: File,
    /// Records appended and not yet written to the file.
    buf: Vec<u8>,
    /// The sequence number of the last record appended (0: none).
    last: u64,
    /// The sequence number up to which the file holds the records durably.
    durable: u64,
}

impl LogInner {
    /// Writes the buffered records and syncs the file, if the log is not durable up to
    /// `lsn` yet. Returns how far it is durable.
    fn flush_to(&mut self, lsn: u64) -> io::Result<u64> {
        if self.durable >= lsn {
            return Ok(self.durable);
        }
        self.file.write_all(&self.buf)?;
        self.buf.clear();
        self.file.sync_data()?;
        self.durable = self.last;
        Ok(self.durable)
    }
}

impl WriteAheadLog for Log {
    fn flush_log(&self, lsn: u64) -> io::Result<()> {
        let durable = self.inner.lock().unwrap().flush_to(lsn)?;
        if durable < lsn {
            return Err(io::Error::other(format!(
                "asked to make the log durable up to {lsn}, but it holds records only up to {durable}"
            )));
        }
        Ok(())
    }
}

/// A log record as stored: `lsn`, `page`, `offset`, `len`, the bytes, then a checksum of all
/// of it (a torn tail fails the checksum and ends the replay).
struct Record {
    lsn: u64,
    page: u32,
    offset: u16,
    bytes: Vec<u8>,
}

impl Record {
    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.lsn.to_le_bytes());
        out.extend_from_slice(&self.page.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&(self.bytes.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.bytes);
        let sum = checksum(&out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
    }

    /// The record at the start of `buf` and its length, or `None` at the end of the valid
    /// records.
    fn decode(buf: &[u8]) -> Option<(Record, usize)> {
        let head = buf.get(..16)?;
        let lsn = u64::from_le_bytes(head[..8].try_into().ok()?);
        let page = u32::from_le_bytes(head[8..12].try_into().ok()?);
        let offset = u16::from_le_bytes(head[12..14].try_into().ok()?);
        let len = u16::from_le_bytes(head[14..16].try_into().ok()?) as usize;
        let end = 16 + len;
        let sum = u64::from_le_bytes(buf.get(end..end + 8)?.try_into().ok()?);
        if sum != checksum(&buf[..end]) || lsn == 0 {
            return None;
        }
        let bytes = buf[16..end].to_vec();
        Some((
            Record {
                lsn,
                page,
                offset,
                bytes,
            },
            end + 8,
        ))
    }
}

/// FNV-1a, 64 bits: enough to tell a torn record from a whole one.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The page number of a checkpoint record (no page: only its sequence number counts).
const CHECKPOINT: u32 = u32::MAX;

/// The store.
pub struct Store {
    cache: FolioCache,
    data: CachedFile,
    log: Arc<Log>,
    pages: u64,
    /// Bytes of a page.
    page: usize,
    dir: std::path::PathBuf,
}

impl Store {
    /// Opens (or creates) the store of `pages` pages in `dir` with a cache of `budget` bytes,
    /// and replays its log. Returns the store and the number of records replayed.
    pub fn open(dir: &Path, pages: u64, budget: usize) -> io::Result<(Store, u64)> {
        Store::open_replaying(dir, pages, budget, true)
    }

    /// [`Store::open`], replaying the log only if `replay` (without, committed updates that
    /// had not reached the data file are lost: the crash test's control).
    pub fn open_replaying(
        dir: &Path,
        pages: u64,
        budget: usize,
        replay: bool,
    ) -> io::Result<(Store, u64)> {
        Store::open_with(dir, pages, Config::buffer_pool(budget), replay)
    }

    /// [`Store::open_replaying`] with a cache built from `config` (its I/O settings, say).
    pub fn open_with(
        dir: &Path,
        pages: u64,
        config: Config,
        replay: bool,
    ) -> io::Result<(Store, u64)> {
        Store::open_paged(dir, pages, PAGE, config, replay)
    }

    /// [`Store::open_with`] for pages of `page` bytes: 4 KiB, or a power of two from 8 to 64
    /// KiB, each updated as one block.
    pub fn open_paged(
        dir: &Path,
        pages: u64,
        page: usize,
        config: Config,
        replay: bool,
    ) -> io::Result<(Store, u64)> {
        if !page.is_power_of_two() || !(PAGE..=64 << 10).contains(&page) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a page of {page} bytes: a power of two from 4 to 64 KiB"),
            ));
        }
        let cache = FolioCache::new(config)?;
        let data = cache.open_with(
            dir.join("data"),
            OpenOptions::new().write(true).create(true),
        )?;
        if data.len() < pages * page as u64 {
            data.set_len(pages * page as u64)?;
            data.sync_data()?;
            foliocache::sync_dir(dir)?;
        }
        let mut file = FsOpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(dir.join("wal"))?;
        let mut old = Vec::new();
        file.read_to_end(&mut old)?;
        let (mut at, mut records) = (0, Vec::new());
        while let Some((r, len)) = Record::decode(&old[at..]) {
            at += len;
            records.push(r);
        }
        if !replay {
            records.clear();
        }
        // The records read are durable in the log: the pages replayed from them may be
        // written back at once.
        let last = records.iter().map(|r| r.lsn).max().unwrap_or(0);
        cache.log_durable(last);
        // Redo: every record newer than its page.
        let mut replayed = 0;
        for r in records {
            if r.page == CHECKPOINT {
                continue;
            }
            if r.page as u64 >= pages || r.offset as usize + r.bytes.len() > page {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "log record {} names page {} bytes {}.., outside the store",
                        r.lsn, r.page, r.offset
                    ),
                ));
            }
            let at = r.page as u64 * page as u64;
            // The page read whole (one folio: a block latch then finds it as it needs it).
            let page_lsn = {
                let whole = data.get_range(at, page)?;
                let mut h = [0u8; HEADER];
                h.copy_from_slice(&whole.slices().next().expect("a page")[..HEADER]);
                u64::from_le_bytes(h)
            };
            if r.lsn > page_lsn {
                let mut g = latch(&data, at, page)?;
                let o = r.offset as usize;
                g[o..o + r.bytes.len()].copy_from_slice(&r.bytes);
                g[..HEADER].copy_from_slice(&r.lsn.to_le_bytes());
                g.set_lsn(r.lsn);
                replayed += 1;
            }
        }
        // A torn tail is cut off, so new records follow the last whole one.
        file.set_len(at as u64)?;
        file.sync_data()?;
        let log = Arc::new(Log {
            inner: Mutex::new(LogInner {
                file,
                buf: Vec::new(),
                last,
                durable: last,
            }),
        });
        cache.set_write_ahead_log(Some(log.clone()));
        let store = Store {
            cache,
            data,
            log,
            pages,
            page,
            dir: dir.to_path_buf(),
        };
        Ok((store, replayed))
    }

    /// Changes `bytes.len()` bytes of page `page` at `offset` (past the page's header):
    /// logged, applied in the cache at once, durable at the next [`Store::commit`]. Returns
    /// the change's sequence number.
    pub fn update(&self, page: u64, offset: usize, bytes: &[u8]) -> io::Result<u64> {
        if page >= self.pages || offset < HEADER || offset + bytes.len() > self.page {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("page {page}, bytes {offset}..{}", offset + bytes.len()),
            ));
        }
        let mut g = latch(&self.data, page * self.page as u64, self.page)?;
        let lsn = {
            let mut log = self.log.inner.lock().unwrap();
            log.last += 1;
            let lsn = log.last;
            Record {
                lsn,
                page: page as u32,
                offset: offset as u16,
                bytes: bytes.to_vec(),
            }
            .encode(&mut log.buf);
            lsn
        };
        g[offset..offset + bytes.len()].copy_from_slice(bytes);
        g[..HEADER].copy_from_slice(&lsn.to_le_bytes());
        g.set_lsn(lsn);
        g.commit();
        Ok(lsn)
    }

    /// Makes every update so far durable (a group commit): the log's records are written and
    /// synced. Returns the last sequence number committed.
    pub fn commit(&self) -> io::Result<u64> {
        let durable = {
            let mut log = self.log.inner.lock().unwrap();
            let last = log.last;
            log.flush_to(last)?
        };
        self.cache.log_durable(durable);
        Ok(durable)
    }

    /// Reads `buf.len()` bytes of page `page` at `offset` (what the last update there left,
    /// committed or not).
    pub fn read(&self, page: u64, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        self.data
            .read_exact_at(buf, page * self.page as u64 + offset as u64)?;
        Ok(())
    }

    /// Commits, writes every page back and syncs the data file, then starts a new log that
    /// holds only a checkpoint record: what a restart replays starts here.
    pub fn checkpoint(&self) -> io::Result<()> {
        let upto = self.commit()?;
        self.cache.checkpoint(upto)?;
        let mut log = self.log.inner.lock().unwrap();
        if log.last != upto {
            // Records logged since the commit (by other threads) must stay: keep the log.
            return Ok(());
        }
        // The new log is written beside the old one and renamed over it, so a crash leaves
        // one or the other, whole.
        let tmp = self.dir.join("wal.new");
        let mut f = File::create(&tmp)?;
        let mut rec = Vec::new();
        Record {
            lsn: upto,
            page: CHECKPOINT,
            offset: 0,
            bytes: Vec::new(),
        }
        .encode(&mut rec);
        f.write_all(&rec)?;
        f.sync_data()?;
        std::fs::rename(&tmp, self.dir.join("wal"))?;
        foliocache::sync_dir(&self.dir)?;
        log.file = FsOpenOptions::new()
            .append(true)
            .open(self.dir.join("wal"))?;
        Ok(())
    }

    /// The cache the store runs on (its statistics).
    pub fn cache(&self) -> &FolioCache {
        &self.cache
    }

    /// The highest sequence number the log holds (durably or not).
    pub fn last_lsn(&self) -> u64 {
        self.log.inner.lock().unwrap().last
    }

    /// How far the log is durable, read on any thread: for an auditor that compares the
    /// page LSNs it finds in the data file with it (a page read first, then this: a page
    /// holding more is one written ahead of its log). The lab's `bufmgr`, which includes
    /// this file, audits its runs with it; the example itself does not.
    #[allow(dead_code)]
    pub fn durable_probe(&self) -> impl Fn() -> u64 + Send + 'static {
        let log = self.log.clone();
        move || log.inner.lock().unwrap().durable
    }

    /// The page LSN of page `page`: the sequence number of the last change applied to it.
    pub fn page_lsn(&self, page: u64) -> io::Result<u64> {
        let mut h = [0u8; HEADER];
        self.data.read_exact_at(&mut h, page * self.page as u64)?;
        Ok(u64::from_le_bytes(h))
    }
}

/// The in-place latch of the page of `len` bytes at byte `at` of `data`: a 4 KiB page's, or
/// a larger page's as one block.
fn latch(data: &CachedFile, at: u64, len: usize) -> io::Result<foliocache::InPlaceFolioMut<'_>> {
    Ok(if len == PAGE {
        data.get_folio_mut_in_place(at / PAGE as u64)?
    } else {
        data.get_block_mut_in_place(at, len)?
    })
}
