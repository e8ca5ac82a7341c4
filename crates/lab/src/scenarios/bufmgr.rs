//! `bufmgr`: foliocache as a storage engine's buffer pool (issue 25), against the same engine
//! on the kernel's page cache.
//!
//! # The engine
//!
//! A page store with a write-ahead log: the data file is `--file-mib` of pages (4 KiB, then
//! 16 KiB: `--page-kib`) whose first 8 bytes hold the page's log sequence number; an update changes 100 bytes of one page
//! (Zipf 0.99 page numbers, the hot pages scattered over the file), logs a record of the
//! change, and sets the page's number; every 100 updates the log is committed (written and
//! synced: a group commit); every `--checkpoint-ms` the data file is checkpointed (every
//! page written back and synced, the log replaced by one checkpoint record). One thread.
//!
//! | variant | an update | a commit | a checkpoint |
//! |---|---|---|---|
//! | `kernel` | `pread` of the page, the change, `pwrite` of the page (the kernel's page cache keeps it dirty), the record appended to a buffer | `write(2)` of the buffered records, `fdatasync(2)` of the log | `fdatasync(2)` of the data file, the log truncated and synced |
//! | `foliocache` | the store of `examples/wal_store` (this file includes it): `get_folio_mut_in_place` (an exclusive latch on the cached page itself; for a larger page `get_block_mut_in_place`, one latch over the page's folio), the change, `set_lsn`, commit of the latch; the record appended to a buffer | the same log write and sync, then `FolioCache::log_durable` | `FolioCache::checkpoint` (every page whose change is at or below the commit written and synced), the log replaced |
//!
//! foliocache's cache is `Config::buffer_pool` with a budget of a quarter of the file
//! (`--budget-pct`), so pages reach the file at checkpoints, when reclaim evicts them (the
//! cold dirty pages it meets are written by the flusher, by the background reclaimer, or
//! by an allocation that finds no clean page: `Config::pageout`; no dirty threshold) and by
//! the 10-minute expiry,
//! never before the log holds their change (the write-ahead rule; `tests/write_ahead.rs`
//! checks it). The kernel variant's page writes go to the kernel's page cache, which writes
//! them back on its own schedule, unseen by the process.
//!
//! Every measurement starts from a new, empty (sparse) data file and an empty log, on the
//! file system of `--dir` (default `/var/tmp`: a disk, so syncs cost what they cost).
//!
//! # Output
//!
//! | kind | names |
//! |---|---|
//! | variants | `kernel`, `foliocache` (rows of pages larger than 4 KiB carry `page_bytes`); rows with `workload` `resident`: `read-hit`, `latched-update` (foliocache on a resident 1 MiB file: a zero-copy `get_folio` hit, and an update through `get_folio_mut_in_place` of 100 bytes, committed) |
//! | metrics | `ns_per_op` (the resident rows); `ops_per_sec` (updates per second, commits and checkpoints included), `p50_latency_ns`, `p99_latency_ns` (one update; a commit or checkpoint is charged to the update that triggers it), `page_writes_per_update` (in the engine's pages; foliocache: pages written back to the data file; kernel: its `pwrite` calls, each of one page), `misses_per_update` (foliocache: lookups that missed its cache, each a page read), `write_ahead_violations` (foliocache: pages found in the data file holding a change past the log's durable point, by an auditor thread that reads 32 random pages' headers every 20 ms while the store runs, through the kernel), `copies_per_update` (foliocache: pages copied to change them, `writes_replaced`: a latch copies only when someone else holds the page; kernel: 0, not measured: its copy into the page cache is the `pwrite`) |
//! | comparisons | `foliocache` against `kernel` on `ops_per_sec` and `p99_latency_ns`; `latched-update` against `read-hit` on `ns_per_op` |
//! | checks | `updates_recovered` (foliocache: after each measurement the store is reopened, its log replayed, and every updated page's number compared with the last update made to it: pages that differ, 0); `write_ahead_rule` (the audit's pages ahead of the log, over every run: 0; the pages it read are in `stats.audited_pages`) |
//!
//! Issue 25's targets (full mode, ext4): page writebacks per update at most 0.3 at a quarter
//! budget with a checkpoint every 10 s; at least 95% of updates in place (no copy) when no
//! guard holds the page; an update at most 2x a zero-copy read hit. The targets table prints the first
//! two; they are not checks (a noisy machine must not fail CI).

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io::{Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use serde_json::json;

use super::peers::workload::{Rng, Zipf};
use crate::harness::{fmt_num, merge, Bench, CommonArgs, IoArgs, IoSetup, LabResult, Report, Table};

#[path = "../../../foliocache/examples/wal_store/store.rs"]
#[allow(dead_code)]
mod store;

/// Not a seed: issue 25's question.
pub const SEED: &str = "no seed (issue 25: the cache as a storage engine's buffer pool)";

/// Subcommand name.
pub const NAME: &str = "bufmgr";

/// One line on what it measures.
pub const ABOUT: &str = "a page store with a write-ahead log: Zipf 100-byte updates of 4 KiB \
and 16 KiB pages, a group commit every 100, checkpoints; foliocache as the buffer pool \
(page and block latches, the write-ahead rule, a quarter-file budget) against \
pread/pwrite/fdatasync";

/// Variant names, baseline first.
pub const VARIANTS: [&str; 2] = ["kernel", "foliocache"];

const PAGE: usize = 4096;
/// The page sizes measured by default, in KiB.
const PAGE_KIB: [u64; 2] = [4, 16];
/// Bytes an update changes.
const CHANGE: usize = 100;
/// Updates per group commit.
const COMMIT_EVERY: u64 = 100;

/// Options of `foliocache-lab bufmgr`.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct Args {
    /// Options every scenario takes.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Where the files are (`--dir`, default /var/tmp) and how foliocache reads and writes them.
    #[command(flatten)]
    pub io: IoArgs,
    /// The data file's size in MiB [default: 64; 8 with --quick].
    #[arg(long)]
    pub file_mib: Option<u64>,
    /// foliocache's budget, in percent of the data file.
    #[arg(long, default_value_t = 25)]
    pub budget_pct: u64,
    /// Milliseconds between checkpoints [default: 10000; 200 with --quick].
    #[arg(long)]
    pub checkpoint_ms: Option<u64>,
    /// The engine's page sizes in KiB, each measured in turn (4, 8, 16, 32 or 64; a larger
    /// page is latched as one block) [default: 4,16].
    #[arg(long, value_delimiter = ',')]
    pub page_kib: Vec<u64>,
}

super::scenario!();

/// The engine on the kernel's page cache: `pread`/`pwrite` of pages, a log written and
/// synced at each commit.
struct KernelStore {
    data: File,
    log: File,
    buf: Vec<u8>,
    last: u64,
    pwrites: u64,
    /// Bytes of a page.
    page: usize,
}

impl KernelStore {
    fn open(dir: &Path, pages: u64, page: usize) -> std::io::Result<KernelStore> {
        let data = FsOpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("data"))?;
        data.set_len(pages * page as u64)?;
        data.sync_data()?;
        let log = FsOpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("wal"))?;
        Ok(KernelStore {
            data,
            log,
            buf: Vec::new(),
            last: 0,
            pwrites: 0,
            page,
        })
    }
}

/// One measurement's results.
struct Sample {
    updates: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
    page_writes: u64,
    copies: u64,
    /// Lookups that missed the cache (foliocache only).
    misses: Option<u64>,
    /// The cache's counters of the run (foliocache only), for the JSON's `stats`.
    cache: Option<serde_json::Value>,
    /// Updated pages whose number after a reopen differs from their last update's.
    lost: u64,
    /// The write-ahead audit (foliocache only): pages looked at, pages ahead of the log.
    audit: Option<(u64, u64)>,
}

/// What the workload asks of an engine.
trait Engine {
    /// Changes `bytes` of `page` at `offset`; returns the change's log number.
    fn update(&mut self, page: u64, offset: usize, bytes: &[u8]) -> LabResult<u64>;
    /// A group commit.
    fn commit(&mut self) -> LabResult<()>;
    /// A checkpoint.
    fn checkpoint(&mut self) -> LabResult<()>;
}

impl Engine for KernelStore {
    fn update(&mut self, page: u64, offset: usize, bytes: &[u8]) -> LabResult<u64> {
        let mut p = vec![0u8; self.page];
        let at = page * self.page as u64;
        self.data.read_exact_at(&mut p, at).map_err(io_err)?;
        self.last += 1;
        // The record: number, page, offset, length, bytes (the store's layout, no checksum).
        self.buf.extend_from_slice(&self.last.to_le_bytes());
        self.buf.extend_from_slice(&(page as u32).to_le_bytes());
        self.buf.extend_from_slice(&(offset as u16).to_le_bytes());
        self.buf.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(bytes);
        p[offset..offset + bytes.len()].copy_from_slice(bytes);
        p[..8].copy_from_slice(&self.last.to_le_bytes());
        self.data.write_all_at(&p, at).map_err(io_err)?;
        self.pwrites += 1;
        Ok(self.last)
    }

    fn commit(&mut self) -> LabResult<()> {
        self.log.write_all(&self.buf).map_err(io_err)?;
        self.buf.clear();
        self.log.sync_data().map_err(io_err)
    }

    fn checkpoint(&mut self) -> LabResult<()> {
        self.commit()?;
        self.data.sync_data().map_err(io_err)?;
        self.log.set_len(0).map_err(io_err)?;
        self.log
            .seek(std::io::SeekFrom::Start(0))
            .map_err(io_err)?;
        self.log.sync_data().map_err(io_err)
    }
}

impl Engine for store::Store {
    fn update(&mut self, page: u64, offset: usize, bytes: &[u8]) -> LabResult<u64> {
        store::Store::update(self, page, offset, bytes).map_err(io_err)
    }

    fn commit(&mut self) -> LabResult<()> {
        store::Store::commit(self).map(|_| ()).map_err(io_err)
    }

    fn checkpoint(&mut self) -> LabResult<()> {
        store::Store::checkpoint(self).map_err(io_err)
    }
}

/// The workload: Zipf updates until `d` has passed (and the commit group is whole), a
/// commit every [`COMMIT_EVERY`], a checkpoint at the first commit after `checkpoint_every`.
/// Records the last log number of every page updated in `last_of`.
fn drive(
    e: &mut impl Engine,
    pages: u64,
    page_bytes: usize,
    d: Duration,
    checkpoint_every: Duration,
    rng: &mut Rng,
    last_of: &mut std::collections::HashMap<u64, u64>,
) -> LabResult<(u64, Duration, Histogram<u64>)> {
    let zipf = Zipf::new(pages, 0.99);
    let mut hist = Histogram::<u64>::new(3).map_err(io_err)?;
    let mut change = [0u8; CHANGE];
    let t0 = Instant::now();
    let mut last_checkpoint = t0;
    let mut n = 0u64;
    while t0.elapsed() < d || n % COMMIT_EVERY != 0 {
        // The hot pages scattered over the file, as a B-tree's are.
        let page = (zipf.sample(rng) - 1).wrapping_mul(0x9e37_79b9) % pages;
        let offset = 8 + rng.below((page_bytes - 8 - CHANGE) as u64) as usize;
        change.fill(n as u8);
        let t = Instant::now();
        let lsn = e.update(page, offset, &change)?;
        n += 1;
        if n % COMMIT_EVERY == 0 {
            e.commit()?;
            if last_checkpoint.elapsed() >= checkpoint_every {
                e.checkpoint()?;
                last_checkpoint = Instant::now();
            }
        }
        let _ = hist.record(t.elapsed().as_nanos() as u64);
        last_of.insert(page, lsn);
    }
    Ok((n, t0.elapsed(), hist))
}

fn io_err(e: impl std::fmt::Display) -> crate::harness::LabError {
    crate::lab_err!("bufmgr: {e}")
}

fn run_kernel(
    dir: &Path,
    (pages, page): (u64, usize),
    d: Duration,
    ckpt: Duration,
    seed: u64,
) -> LabResult<Sample> {
    let mut store = KernelStore::open(dir, pages, page).map_err(io_err)?;
    let mut rng = Rng::new(seed);
    let mut last = std::collections::HashMap::new();
    let (updates, elapsed, latency) =
        drive(&mut store, pages, page, d, ckpt, &mut rng, &mut last)?;
    Ok(Sample {
        updates,
        elapsed,
        latency,
        page_writes: store.pwrites,
        copies: 0,
        misses: None,
        cache: None,
        lost: 0,
        audit: None,
    })
}

fn run_foliocache(
    dir: &Path,
    (pages, page): (u64, usize),
    config: &foliocache::Config,
    d: Duration,
    ckpt: Duration,
    seed: u64,
) -> LabResult<Sample> {
    let open = || store::Store::open_paged(dir, pages, page, config.clone(), true).map_err(io_err);
    let (mut st, _) = open()?;
    let before = st.cache().stats();
    let mut rng = Rng::new(seed);
    let mut last = std::collections::HashMap::new();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let durable = st.durable_probe();
    let data = dir.join("data");
    let ((updates, elapsed, latency), audit) = std::thread::scope(|s| {
        let auditor = s.spawn(|| audit(&data, pages, page, &durable, &stop, seed));
        let r = drive(&mut st, pages, page, d, ckpt, &mut rng, &mut last);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let audit = auditor.join().expect("the auditor panicked");
        r.and_then(|r| Ok((r, audit?)))
    })?;
    let after = st.cache().stats();
    drop(st);
    // Every update is found after a restart (committed: `drive` ends on a commit; the log
    // replayed).
    let (st, _) = open()?;
    let mut lost = 0;
    for (&page, &lsn) in &last {
        if st.page_lsn(page).map_err(io_err)? != lsn {
            lost += 1;
        }
    }
    Ok(Sample {
        updates,
        elapsed,
        latency,
        // In the engine's pages (a 16 KiB page is one folio of four 4 KiB pages).
        page_writes: (after.writeback_pages - before.writeback_pages) / (page / PAGE) as u64,
        copies: after.writes_replaced - before.writes_replaced,
        misses: Some(after.misses - before.misses),
        cache: Some(json!({
            "pageouts": after.pageouts - before.pageouts,
            "pageouts_direct": after.pageouts_direct - before.pageouts_direct,
            "dirty_throttled": after.dirty_throttled - before.dirty_throttled,
            "reclaim_dirty_kept": after.reclaim_dirty_kept - before.reclaim_dirty_kept,
            "writeback_pages": after.writeback_pages - before.writeback_pages,
            "waits_on_latched": after.waits_on_latched - before.waits_on_latched,
            "folio_collapses": after.folio_collapses - before.folio_collapses,
            "folio_splits": after.folio_splits - before.folio_splits,
        })),
        lost,
        audit: Some(audit),
    })
}

/// The write-ahead rule, seen from the data file while the store runs: every
/// [`AUDIT_EVERY`], the headers of [`AUDIT_PAGES`] pages chosen at random are read from the
/// file (through the kernel, not the cache), each compared with how far the log was durable
/// after it was read. A page on disk holding a higher number was written ahead of its log.
/// A sample, not every write (`tests/write_ahead.rs` checks every page write against the
/// durable point): a page written ahead and then covered by the next commit before a look
/// is not seen. Returns (pages looked at, pages ahead of the log).
fn audit(
    data: &Path,
    pages: u64,
    page: usize,
    durable: &(impl Fn() -> u64 + Sync),
    stop: &std::sync::atomic::AtomicBool,
    seed: u64,
) -> LabResult<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(data).map_err(io_err)?;
    let mut rng = Rng::new(seed ^ 0xa0d1);
    let (mut looked, mut ahead) = (0u64, 0u64);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for _ in 0..AUDIT_PAGES {
            let p = rng.below(pages);
            let mut h = [0u8; store::HEADER];
            file.read_exact_at(&mut h, p * page as u64).map_err(io_err)?;
            looked += 1;
            if u64::from_le_bytes(h) > durable() {
                ahead += 1;
            }
        }
        std::thread::sleep(AUDIT_EVERY);
    }
    Ok((looked, ahead))
}

/// How often [`audit`] looks at the data file.
const AUDIT_EVERY: Duration = Duration::from_millis(20);

/// Pages [`audit`] reads at each look.
const AUDIT_PAGES: u64 = 32;

/// Runs the scenario.
pub fn run(args: &Args) -> LabResult<Report> {
    let settings = args.common.settings();
    let file_mib = args.file_mib.unwrap_or(if settings.quick { 8 } else { 64 });
    if file_mib == 0 || !(1..=100).contains(&args.budget_pct) {
        return Err(crate::lab_err!(
            "bufmgr: --file-mib must be at least 1 and --budget-pct 1 to 100"
        ));
    }
    let page_kib = if args.page_kib.is_empty() {
        PAGE_KIB.to_vec()
    } else {
        args.page_kib.clone()
    };
    if let Some(k) = page_kib.iter().find(|&&k| ![4, 8, 16, 32, 64].contains(&k) || k << 10 > file_mib << 20) {
        return Err(crate::lab_err!(
            "bufmgr: --page-kib {k}: pages of 4, 8, 16, 32 or 64 KiB, no larger than the file"
        ));
    }
    let budget = ((file_mib << 20) * args.budget_pct / 100) as usize;
    let ckpt = Duration::from_millis(
        args.checkpoint_ms
            .unwrap_or(if settings.quick { 200 } else { 10_000 }),
    );
    let base = args.io.dir_or(|| "/var/tmp".into());
    std::fs::create_dir_all(&base).map_err(io_err)?;
    let setup = IoSetup::probe(&args.io, &base)?;
    let params = merge(
        json!({
            "variants": VARIANTS,
            "file_bytes": file_mib << 20,
            "page_bytes": page_kib.iter().map(|k| k << 10).collect::<Vec<_>>(),
            "budget_bytes": budget,
            "budget_pct": args.budget_pct,
            "checkpoint_ms": ckpt.as_millis() as u64,
            "commit_every_updates": COMMIT_EVERY,
            "change_bytes": CHANGE,
            "skew": 0.99,
            "foliocache_config": "Config::buffer_pool (pageout by the flusher, the background reclaimer and allocations, no dirty threshold, 10-minute expiry), the write-ahead log hook",
        }),
        setup.params(),
    );
    let config = args.io.apply(foliocache::Config::buffer_pool(budget));
    let mut bench = Bench::new(
        NAME,
        SEED,
        &settings,
        params,
        VARIANTS.len() * page_kib.len() + RESIDENT.len(),
    );
    let mut lost = 0;
    let (mut audited, mut ahead) = (0u64, 0u64);
    let mut extra_stats = Vec::new();
    let d = settings.duration;
    for &kib in &page_kib {
        let page = (kib << 10) as usize;
        let geometry = ((file_mib << 20) / page as u64, page);
        let label = if kib == 4 { String::new() } else { format!("{kib} KiB pages") };
        bench.measure_at(&label, &[1], &VARIANTS, &page_extra(page), |il, &v, _, round| {
        let dir = tempfile::Builder::new()
            .prefix("foliocache-bufmgr-")
            .tempdir_in(&base)
            .map_err(io_err)?;
        let seed = 0xb0f_u64 ^ round as u64;
        let s = if v == "kernel" {
            run_kernel(dir.path(), geometry, d, ckpt, seed)?
        } else {
            run_foliocache(dir.path(), geometry, &config, d, ckpt, seed)?
        };
        lost += s.lost;
        let u = s.updates.max(1) as f64;
        il.add(v, 1, "ops_per_sec", s.updates as f64 / s.elapsed.as_secs_f64());
        il.add(v, 1, "p50_latency_ns", s.latency.value_at_quantile(0.5) as f64);
        il.add(v, 1, "p99_latency_ns", s.latency.value_at_quantile(0.99) as f64);
        il.add(v, 1, "page_writes_per_update", s.page_writes as f64 / u);
        il.add(v, 1, "copies_per_update", s.copies as f64 / u);
        if let Some(m) = s.misses {
            il.add(v, 1, "misses_per_update", m as f64 / u);
        }
        if let Some((looked, found)) = s.audit {
            il.add(v, 1, "write_ahead_violations", found as f64);
            audited += looked;
            ahead += found;
        }
        extra_stats.push(json!({
            "variant": v,
            "page_bytes": page,
            "updates": s.updates,
            "misses": s.misses,
            "cache": s.cache,
            "audit": s.audit.map(|(looked, ahead)| json!({ "pages": looked, "ahead_of_log": ahead })),
        }));
        Ok(())
    })?;
    }
    // The cost of one update against one zero-copy read hit, on a resident page.
    let resident = resident_extra();
    bench.measure_at(
        "resident",
        &[1],
        &RESIDENT,
        &resident,
        |il, &v, _, _| {
            il.add(v, 1, "ns_per_op", resident_op(&base, v, d)?);
            Ok(())
        },
    )?;
    let report = &mut bench.report;
    report.compare(RESIDENT[0], RESIDENT[1], 1, "ns_per_op", &resident);
    for &kib in &page_kib {
        let extra = page_extra((kib << 10) as usize);
        report.compare(VARIANTS[0], VARIANTS[1], 1, "ops_per_sec", &extra);
        report.compare(VARIANTS[0], VARIANTS[1], 1, "p99_latency_ns", &extra);
    }
    report.check("updates_recovered", json!(lost), lost == 0);
    report.check("write_ahead_rule", json!(ahead), ahead == 0);
    report.stats = Some(json!({ "samples": extra_stats, "audited_pages": audited }));
    let mut tables: Vec<(String, Table)> = page_kib
        .iter()
        .map(|&kib| {
            (
                format!(
                    "{} MiB file of {kib} KiB pages, foliocache budget {}% of it, a commit \
                     every {COMMIT_EVERY} updates, a checkpoint every {} ms, on {} (medians)",
                    file_mib,
                    args.budget_pct,
                    ckpt.as_millis(),
                    setup.header()
                ),
                metrics_table(&bench.report, &page_extra((kib << 10) as usize)),
            )
        })
        .collect();
    tables.push((
        "Issue 25's targets".to_string(),
        targets_table(&bench.report, &page_kib, (audited, ahead)),
    ));
    bench.finish(&settings, &tables, None)
}

/// The resident comparison's variants: a zero-copy read hit (`get_folio`, dropped) and an
/// update (`get_folio_mut_in_place`, 100 bytes changed, committed), each of a cached page of a
/// resident 1 MiB file.
pub const RESIDENT: [&str; 2] = ["read-hit", "latched-update"];

/// The rows' attributes for pages of `page` bytes: none for 4 KiB (the rows before page
/// sizes were measured), `page_bytes` otherwise.
fn page_extra(page: usize) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    if page != PAGE {
        m.insert("page_bytes".into(), json!(page));
    }
    m
}

fn resident_extra() -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("workload".into(), json!("resident"));
    m
}

/// Nanoseconds per `v` operation on a resident file, over `d`.
fn resident_op(base: &Path, v: &str, d: Duration) -> LabResult<f64> {
    const PAGES: u64 = 256;
    let dir = tempfile::Builder::new()
        .prefix("foliocache-bufmgr-")
        .tempdir_in(base)
        .map_err(io_err)?;
    let cache = foliocache::FolioCache::new(foliocache::Config::buffer_pool(64 << 20)).map_err(io_err)?;
    let f = cache
        .open_with(
            dir.path().join("resident"),
            foliocache::OpenOptions::new().write(true).create(true),
        )
        .map_err(io_err)?;
    f.write_all_at(&vec![1u8; PAGES as usize * PAGE], 0).map_err(io_err)?;
    let change = [7u8; CHANGE];
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut sum = 0u64;
    while n % 1024 != 0 || t0.elapsed() < d {
        let page = n.wrapping_mul(0x9e37_79b9) % PAGES;
        if v == RESIDENT[0] {
            let g = f.get_folio(page).map_err(io_err)?;
            sum += g[100] as u64;
        } else {
            let mut g = f.get_folio_mut_in_place(page).map_err(io_err)?;
            g[100..100 + CHANGE].copy_from_slice(&change);
            g.commit();
        }
        n += 1;
    }
    std::hint::black_box(sum);
    Ok(t0.elapsed().as_nanos() as f64 / n as f64)
}

const METRICS: [&str; 5] = [
    "ops_per_sec",
    "p50_latency_ns",
    "p99_latency_ns",
    "page_writes_per_update",
    "copies_per_update",
];

/// Metrics of the foliocache variant only (the kernel's page cache does not say).
const CACHE_METRICS: [&str; 2] = ["misses_per_update", "write_ahead_violations"];

fn median(
    r: &Report,
    v: &str,
    m: &str,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Option<f64> {
    r.row(v, 1, m, extra).map(|r| r.median)
}

fn metrics_table(r: &Report, extra: &serde_json::Map<String, serde_json::Value>) -> Table {
    let mut t = Table::new(std::iter::once("metric").chain(VARIANTS));
    for m in METRICS.into_iter().chain(CACHE_METRICS) {
        let mut cells = vec![m.to_string()];
        for v in VARIANTS {
            cells.push(median(r, v, m, extra).map_or("-".into(), |x| {
                if x < 10.0 {
                    format!("{x:.3}")
                } else {
                    fmt_num(x)
                }
            }));
        }
        t.row(cells);
    }
    t
}

fn targets_table(r: &Report, page_kib: &[u64], (audited, ahead): (u64, u64)) -> Table {
    let mut t = Table::new(["target", "measured", "met"]);
    let yes = |ok: bool| if ok { "yes" } else { "no" };
    t.row([
        "write-ahead violations: 0".to_string(),
        format!("{ahead} of {audited} pages read from the file"),
        yes(ahead == 0).to_string(),
    ]);
    for &kib in page_kib {
        let extra = page_extra((kib << 10) as usize);
        let wb = median(r, "foliocache", "page_writes_per_update", &extra);
        let copies = median(r, "foliocache", "copies_per_update", &extra);
        if let Some(wb) = wb {
            t.row([
                format!("{kib} KiB pages: page writebacks per update <= 0.3"),
                format!("{wb:.3}"),
                yes(wb <= 0.3).to_string(),
            ]);
        }
        if let Some(c) = copies {
            t.row([
                format!("{kib} KiB pages: updates in place >= 95%"),
                format!("{:.1}%", (1.0 - c).max(0.0) * 100.0),
                yes(c <= 0.05).to_string(),
            ]);
        }
    }
    let res = |v: &str| r.row(v, 1, "ns_per_op", &resident_extra()).map(|x| x.median);
    if let (Some(hit), Some(update)) = (res(RESIDENT[0]), res(RESIDENT[1])) {
        t.row([
            "an update <= 2x a zero-copy read hit".to_string(),
            format!("{update:.0} ns against {hit:.0} ns ({:.1}x)", update / hit),
            yes(update <= 2.0 * hit).to_string(),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_run_measures_both_engines_and_recovers_every_update() {
        let dir = tempfile::tempdir().unwrap();
        let mut args = Args::default();
        args.common.quick = true;
        args.common.runs = Some(1);
        args.common.duration = Some(Duration::from_millis(100));
        args.common.no_progress = true;
        args.io.dir = Some(dir.path().to_path_buf());
        args.file_mib = Some(2);
        args.budget_pct = 25;
        args.checkpoint_ms = Some(30);
        let r = run(&args).unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        let audited = r.stats.as_ref().unwrap()["audited_pages"].as_u64().unwrap();
        assert!(audited > 0, "the write-ahead audit read no page");
        for page in [PAGE, 16 << 10] {
            let ahead = r.row("foliocache", 1, "write_ahead_violations", &page_extra(page));
            assert_eq!(ahead.map(|x| x.median), Some(0.0), "{page}");
            for v in VARIANTS {
                for m in METRICS {
                    assert!(r.row(v, 1, m, &page_extra(page)).is_some(), "{v} {m} {page}");
                }
            }
            // Latched updates change the cached page itself: nobody else holds it, mostly.
            // (The 2 MiB file's pool holds 32 blocks of 16 KiB, so reclaim, which holds a
            // folio while it looks at it, meets the latched blocks often: up to 5% of the
            // 16 KiB updates went into copies in a loaded debug run.)
            let copies = median(&r, "foliocache", "copies_per_update", &page_extra(page)).unwrap();
            let most = if page == PAGE { 0.05 } else { 0.25 };
            assert!(copies < most, "{page}: {copies}");
        }
        for v in RESIDENT {
            assert!(r.row(v, 1, "ns_per_op", &resident_extra()).is_some(), "{v}");
        }
    }
}
