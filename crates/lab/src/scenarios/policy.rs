//! `policy`: replacement policies on synthetic traces, the real cache beside reference
//! policies (issue 26's harness).
//!
//! **The traces** ([`crate::policy::traces`]): fifteen deterministic block-number sequences
//! (Zipf 0.6 to 1.2, Zipf with periodic scans, loops at 1.1x, 1.25x and 2x the capacity
//! with and without 10% Zipf noise, a moving hot set, two tenants, recency bursts, a
//! readahead-heavy mix), over a file of 8,192 blocks of 4 KiB with a capacity of 1,024 and
//! 100,000 reads in quick mode, 65,536 blocks, 8,192 and 1,000,000 reads in full mode (the
//! issue's 256 MiB file and 1/8 budget).
//!
//! **The contenders**, each fresh per trace, each counting every read of the trace (cold
//! misses included):
//!
//! - `foliocache`: the real cache, [`Config::block_cache`] with a budget of the capacity in
//!   pages, one thread, `read_at` of each 4 KiB block of a generated file (under
//!   `/dev/shm` when there is one), the miss ratio from the cache's own counters
//!   (`CacheStats::misses` over the reads; `hits + misses` must equal the reads). Readahead
//!   is off (the block cache's), so on every trace a miss is a block the policy did not
//!   keep. The cache's policy in that configuration is printed with the results: the
//!   protected policy (`LruPolicy::Protected`: the active list a protected set that admits
//!   a refault only if its reuse distance is below the coldest protected block's age, as
//!   LIRS and CLOCK-Pro use non-resident history, and the inactive list sized as ARC sizes
//!   its recency share; `foliocache::mm::lru::workingset` explains it) with workingset
//!   detection and the `Experiment` defaults (`active_second_chance` on).
//! - `foliocache-two-list`: the same cache with
//!   [`Config::lru_policy`]`(LruPolicy::TwoList)`: the kernel's active and inactive lists,
//!   four active pages per inactive one (the block cache's default before issue 26).
//! - `foliocache-readahead`, on the traces with sequential runs only: the same with
//!   `Config::new`'s 32-page readahead window. Its misses are lookups that started a
//!   read; blocks brought in by readahead then hit, so this row is not a policy's miss
//!   ratio but what a user with readahead on would see.
//! - the reference policies of [`crate::policy`] (`lru`, `arc`, `lirs`, `s3-fifo`,
//!   `w-tinylfu`, `belady-opt`) and the policies of `quick_cache` and `moka`, driven with
//!   the same capacity in blocks.
//!
//! **Output**: a table per trace (miss ratio, points above the best online policy, points
//! above Belady's optimum), a summary table (every policy's miss ratio by trace), the
//! checks, JSON rows and a figure of the summary (`<json>.svg` beside the JSON).
//!
//! `--export DIR` writes the traces instead of measuring them: one libCacheSim
//! `oracleGeneral` binary per trace (24 bytes a read: `u32` time, `u64` block, `u32` size 1,
//! `i64` index of the block's next read or -1) and a `manifest.json`;
//! `crates/lab/scripts/libcachesim_reference.py` replays them through libCacheSim.
//!
//! Stable names (see `docs/LAB-RESULTS.md`):
//!
//! | kind | names |
//! |---|---|
//! | variants | `foliocache`, `foliocache-two-list`, `foliocache-readahead`, `lru`, `arc`, `lirs`, `s3-fifo`, `w-tinylfu`, `quick_cache`, `moka`, `belady-opt` |
//! | metrics | `miss_ratio_pct` (misses over reads, in percent; 1 thread, 1 run: a replay is deterministic) |
//! | row fields | `trace`: the trace's name |
//! | comparisons | per trace, metric `miss_ratio_pct`: candidate `foliocache` against the best online policy of the trace (baseline, named in the comparison) |
//! | checks | `foliocache_reads_counted` (hits + misses = reads on every trace), `budget_holds_capacity` (the most pages the cache held is within 2% of the capacity, and never above it), `policies_within_capacity` (no model ever held more blocks than its capacity), `belady_is_floor` (no contender missed less than Belady's optimum) |

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args as ClapArgs;
use foliocache::{Config, FolioCache};
use serde_json::{json, Map, Value};

use crate::harness::{Bench, CommonArgs, LabResult, Report, Row, Table};
use crate::policy::traces::{Size, Spec, Trace};
use crate::policy::{Kind, Outcome};
use crate::scenarios::peers::workload;

/// Not a seed: issue 26.
pub const SEED: &str = "none (issue 26: replacement policies on synthetic traces)";

/// The scenario name (subcommand).
pub const NAME: &str = "policy";

/// One line for `all` and the summary.
pub const ABOUT: &str = "miss ratios on synthetic traces (Zipf, scans, loops, moving hot set, \
tenants, bursts, readahead mix): the real cache against LRU, ARC, LIRS, S3-FIFO, W-TinyLFU, \
quick_cache, moka and Belady's optimum";

/// The metric every row carries.
pub const METRIC: &str = "miss_ratio_pct";

/// The seed of every trace unless `--seed` says otherwise (the libCacheSim reference file
/// was made with it).
pub const DEFAULT_SEED: u64 = 42;

/// Options of `foliocache-lab policy`.
#[derive(ClapArgs, Debug, Clone)]
pub struct Args {
    /// Options every scenario takes (`--quick`: the small traces; threads, duration and runs
    /// do not apply: a replay is one deterministic pass).
    #[command(flatten)]
    pub common: CommonArgs,
    /// Only these traces, comma-separated [default: all].
    #[arg(long, value_delimiter = ',')]
    pub traces: Vec<String>,
    /// The traces' seed.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Write the traces as libCacheSim oracleGeneral files and a manifest into this
    /// directory, and measure nothing.
    #[arg(long)]
    pub export: Option<PathBuf>,
}

super::scenario!();

/// One contender's result on one trace.
struct Cell {
    variant: String,
    outcome: Outcome,
}

/// What the real cache did on one trace.
struct Real {
    outcome: Outcome,
    hits: u64,
    /// Pages held by folios at the end of the replay, and the most seen (sampled).
    max_pages: u64,
}

fn size_of(args: &Args) -> Size {
    if args.common.quick {
        Size::Quick
    } else {
        Size::Full
    }
}

fn selected(args: &Args) -> LabResult<Vec<Trace>> {
    if args.traces.is_empty() {
        return Ok(Trace::ALL.to_vec());
    }
    args.traces
        .iter()
        .map(|n| {
            Trace::parse(n).ok_or_else(|| {
                let names: Vec<String> = Trace::ALL.iter().map(|t| t.name()).collect();
                crate::lab_err!("unknown trace `{n}` (have: {})", names.join(", "))
            })
        })
        .collect()
}

/// Runs the scenario (or the export).
pub fn run(args: &Args) -> LabResult<Report> {
    let size = size_of(args);
    let spec = size.spec();
    let traces = selected(args)?;
    if let Some(dir) = &args.export {
        export(dir, &traces, &spec, size, args.seed)?;
        let mut report = Report::new(NAME, SEED, json!({ "export": dir }));
        report.check("exported_traces", traces.len(), true);
        return Ok(report);
    }
    let settings = args.common.settings();
    let dir = scratch_dir()?;
    let path = dir.path().join("data");
    workload::generate(&path, spec.blocks)
        .map_err(|e| crate::lab_err!("generating {}: {e}", path.display()))?;
    let experiment = foliocache::mm::Experiment::new();
    let policy_text = format!(
        "foliocache: Config::block_cache({} pages): readahead off, LRU policy {}, \
         workingset detection on (foliocache-two-list: the two lists, inactive_ratio {} \
         active pages per inactive one); LRU experiment: active_second_chance {}, \
         reference_on_fill {}, add_as_active {}",
        spec.capacity,
        Config::block_cache(spec.capacity * 4096).lru_config().policy,
        foliocache::BLOCK_CACHE_INACTIVE_RATIO,
        experiment.active_second_chance,
        experiment.reference_on_fill,
        experiment.add_as_active
    );
    // One step per trace, about a second each.
    let mut bench = Bench::with_steps(
        NAME,
        SEED,
        &settings,
        json!({
            "size": size.name(),
            "file_blocks": spec.blocks,
            "capacity_blocks": spec.capacity,
            "reads": spec.reads,
            "block_bytes": workload::BLOCK,
            "seed": args.seed,
            "traces": traces.iter().map(|t| t.name()).collect::<Vec<_>>(),
            "foliocache_policy": policy_text,
            "foliocache_config": "Config::block_cache(capacity * 4096); foliocache-two-list: \
                                  the same with lru_policy(LruPolicy::TwoList); \
                                  foliocache-readahead: the same as foliocache with \
                                  readahead_pages(32)",
        }),
        traces.len() as u64,
        std::time::Duration::from_secs(1),
    );
    println!(
        "policy: {} traces of {} reads over {} blocks of 4 KiB ({} MiB), capacity {} blocks \
         ({} MiB), seed {}\n{policy_text}\n",
        traces.len(),
        spec.reads,
        spec.blocks,
        spec.blocks * 4 / 1024,
        spec.capacity,
        spec.capacity * 4 / 1024,
        args.seed
    );
    let mut tables = Vec::new();
    let mut all: Vec<(String, Vec<Cell>)> = Vec::new();
    let (mut uncounted, mut over_cap, mut below_floor) = (Vec::new(), Vec::new(), Vec::new());
    let mut max_pages = 0u64;
    for &t in &traces {
        let name = t.name();
        bench.message(name.clone());
        let start = Instant::now();
        let trace = t.generate(&spec, args.seed);
        let mut cells = Vec::new();
        let mut real_rows = vec![
            ("foliocache", Config::block_cache(spec.capacity * 4096)),
            (
                "foliocache-two-list",
                Config::block_cache(spec.capacity * 4096)
                    .lru_policy(foliocache::mm::lru::LruPolicy::TwoList),
            ),
        ];
        if t.sequential() {
            real_rows.push((
                "foliocache-readahead",
                Config::block_cache(spec.capacity * 4096).readahead_pages(32),
            ));
        }
        for (variant, config) in real_rows {
            let r = replay_real(&path, config, &trace)?;
            if r.hits + r.outcome.misses != r.outcome.reads {
                uncounted.push(format!(
                    "{variant} {name}: {} hits + {} misses != {} reads",
                    r.hits, r.outcome.misses, r.outcome.reads
                ));
            }
            if variant == "foliocache" {
                max_pages = max_pages.max(r.max_pages);
            }
            cells.push(Cell {
                variant: variant.to_string(),
                outcome: r.outcome,
            });
        }
        for k in Kind::ALL {
            let o = k.run(spec.capacity, &trace);
            if o.max_resident > spec.capacity {
                over_cap.push(format!("{} {name}: {}", k.name(), o.max_resident));
            }
            cells.push(Cell {
                variant: k.name().to_string(),
                outcome: o,
            });
        }
        let floor = cells
            .iter()
            .find(|c| c.variant == Kind::Belady.name())
            .map_or(0, |c| c.outcome.misses);
        for c in &cells {
            if c.outcome.misses < floor && c.variant != "foliocache-readahead" {
                below_floor.push(format!("{} {name}", c.variant));
            }
        }
        let mut extra = Map::new();
        extra.insert("trace".into(), json!(name));
        for c in &cells {
            let v = c.outcome.miss_pct();
            bench.report.rows.push(Row {
                variant: c.variant.clone(),
                threads: 1,
                metric: METRIC.into(),
                median: v,
                min: v,
                max: v,
                runs: 1,
                extra: extra.clone(),
            });
        }
        let best = best_online(&cells);
        if let Some(b) = &best {
            bench.report.compare(&b.variant, "foliocache", 1, METRIC, &extra);
        }
        tables.push((
            format!(
                "policy, trace {name}: {} reads, capacity {} blocks ({:.1} s)",
                spec.reads,
                spec.capacity,
                start.elapsed().as_secs_f64()
            ),
            trace_table(
                &cells,
                best.map(|b| b.outcome.miss_pct()),
                floor,
                spec.reads,
            ),
        ));
        all.push((name, cells));
        bench.tick();
    }
    tables.push((
        format!(
            "Summary: miss ratio (%) by trace, every contender; capacity {} blocks of a {}-block \
             file, {} reads a trace",
            spec.capacity, spec.blocks, spec.reads
        ),
        summary_table(&all),
    ));
    let cap = spec.capacity as u64;
    let report = &mut bench.report;
    report.check(
        "foliocache_reads_counted",
        uncounted.len(),
        uncounted.is_empty(),
    );
    report.check(
        "budget_holds_capacity",
        json!({ "max_pages_cached": max_pages, "capacity_pages": cap }),
        max_pages <= cap && max_pages * 100 >= cap * 98,
    );
    report.check(
        "policies_within_capacity",
        over_cap.len(),
        over_cap.is_empty(),
    );
    report.check("belady_is_floor", below_floor.len(), below_floor.is_empty());
    for e in uncounted
        .iter()
        .chain(&over_cap)
        .chain(&below_floor)
        .take(5)
    {
        eprintln!("policy: {e}");
    }
    let report = bench.finish(&settings, &tables, None)?;
    if let (Some(json_path), true) = (&settings.json, settings.plot) {
        let svg = json_path.with_extension("svg");
        std::fs::write(&svg, summary_svg(&all, &spec))
            .map_err(|e| crate::lab_err!("writing {}: {e}", svg.display()))?;
        println!("plot:    {}", svg.display());
    }
    Ok(report)
}

/// A directory for the generated file: under `/dev/shm` when it exists (the misses then
/// cost a memory copy, not a disk read), else the system's temporary directory.
fn scratch_dir() -> LabResult<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("foliocache-policy")
            .tempdir_in(shm)
            .or_else(|_| tempfile::tempdir())
    } else {
        tempfile::tempdir()
    };
    dir.map_err(|e| crate::lab_err!("creating a temporary directory: {e}"))
}

/// Replays `trace` through a fresh cache built from `config` on `path`, one thread.
fn replay_real(path: &Path, config: Config, trace: &[u64]) -> LabResult<Real> {
    let cache = FolioCache::new(config).map_err(|e| crate::lab_err!("foliocache: {e}"))?;
    let file = cache
        .open(path)
        .map_err(|e| crate::lab_err!("foliocache: opening {}: {e}", path.display()))?;
    let before = cache.stats();
    let mut buf = vec![0u8; workload::BLOCK];
    let mut max_pages = 0;
    for (i, &b) in trace.iter().enumerate() {
        file.read_exact_at(&mut buf, b * workload::BLOCK as u64)
            .map_err(|e| crate::lab_err!("foliocache: read_at of block {b}: {e}"))?;
        if i % 4096 == 4095 {
            max_pages = max_pages.max(cache.stats().allocated_pages);
        }
    }
    let after = cache.stats();
    max_pages = max_pages.max(after.allocated_pages);
    Ok(Real {
        outcome: Outcome {
            reads: trace.len() as u64,
            misses: after.misses - before.misses,
            max_resident: max_pages as usize,
        },
        hits: after.hits - before.hits,
        max_pages,
    })
}

/// The online policy (not Belady, not foliocache) that missed least on this trace.
fn best_online(cells: &[Cell]) -> Option<&Cell> {
    cells
        .iter()
        .filter(|c| !c.variant.starts_with("foliocache") && c.variant != Kind::Belady.name())
        .min_by_key(|c| c.outcome.misses)
}

fn trace_table(cells: &[Cell], best: Option<f64>, floor: u64, reads: usize) -> Table {
    let opt = 100.0 * floor as f64 / reads.max(1) as f64;
    let mut t = Table::new([
        "policy",
        "miss ratio (%)",
        "vs best online (points)",
        "vs belady (points)",
    ]);
    for c in cells {
        let m = c.outcome.miss_pct();
        t.row([
            c.variant.clone(),
            format!("{m:.2}"),
            best.map_or("-".into(), |b| format!("{:+.2}", m - b)),
            format!("{:+.2}", m - opt),
        ]);
    }
    t
}

fn summary_table(all: &[(String, Vec<Cell>)]) -> Table {
    let mut variants: Vec<String> = Vec::new();
    for (_, cells) in all {
        for c in cells {
            if !variants.contains(&c.variant) {
                variants.push(c.variant.clone());
            }
        }
    }
    let mut header = vec!["trace".to_string()];
    header.extend(variants.iter().cloned());
    header.push("best online".into());
    let mut t = Table::new(header);
    for (name, cells) in all {
        let mut row = vec![name.clone()];
        for v in &variants {
            row.push(
                cells
                    .iter()
                    .find(|c| &c.variant == v)
                    .map_or("-".into(), |c| format!("{:.2}", c.outcome.miss_pct())),
            );
        }
        row.push(best_online(cells).map_or("-".into(), |c| c.variant.clone()));
        t.row(row);
    }
    t
}

/// The summary as grouped bars: one group per trace, one bar per contender.
fn summary_svg(all: &[(String, Vec<Cell>)], spec: &Spec) -> String {
    const PALETTE: [&str; 10] = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
        "#7f7f7f", "#bcbd22",
    ];
    let mut variants: Vec<&str> = Vec::new();
    for (_, cells) in all {
        for c in cells {
            if !variants.contains(&c.variant.as_str()) {
                variants.push(&c.variant);
            }
        }
    }
    let (left, top, plot_h) = (70.0, 50.0, 320.0);
    let group_w = 14.0 * variants.len() as f64 + 16.0;
    let width = left + group_w * all.len() as f64 + 200.0;
    let height = top + plot_h + 150.0;
    let y = |pct: f64| top + plot_h * (1.0 - pct / 100.0);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="figure" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" role="img">
<title>policy: miss ratio by trace, every contender</title>
<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>
<text class="title" x="{left}" y="24" font-size="15">policy: miss ratio (%) by trace, capacity {} blocks of {}, {} reads</text>
"#,
        spec.capacity, spec.blocks, spec.reads
    );
    for pct in [0.0, 20.0, 40.0, 60.0, 80.0, 100.0] {
        s += &format!(
            r##"<line x1="{left}" x2="{}" y1="{y0}" y2="{y0}" stroke="#ddd"/><text class="y-tick" x="{}" y="{}" font-size="11" text-anchor="end">{pct:.0} %</text>
"##,
            left + group_w * all.len() as f64,
            left - 6.0,
            y(pct) + 4.0,
            y0 = y(pct)
        );
    }
    for (g, (name, cells)) in all.iter().enumerate() {
        let x0 = left + group_w * g as f64 + 8.0;
        for (i, v) in variants.iter().enumerate() {
            if let Some(c) = cells.iter().find(|c| c.variant == *v) {
                let m = c.outcome.miss_pct();
                s += &format!(
                    r#"<rect class="bar" x="{:.1}" y="{:.1}" width="12" height="{:.1}" fill="{}"><title>{name} {v}: {m:.2} %</title></rect>
"#,
                    x0 + 14.0 * i as f64,
                    y(m),
                    y(0.0) - y(m),
                    PALETTE[i % PALETTE.len()]
                );
            }
        }
        let cx = x0 + 7.0 * variants.len() as f64;
        s += &format!(
            r#"<text class="x-tick" x="{cx:.1}" y="{:.1}" font-size="11" text-anchor="end" transform="rotate(-40 {cx:.1} {:.1})">{name}</text>
"#,
            y(0.0) + 14.0,
            y(0.0) + 14.0
        );
    }
    let lx = left + group_w * all.len() as f64 + 20.0;
    for (i, v) in variants.iter().enumerate() {
        let ly = top + 18.0 * i as f64;
        s += &format!(
            r#"<g class="legend"><rect x="{lx}" y="{ly}" width="12" height="12" fill="{}"/><text x="{}" y="{}" font-size="12">{v}</text></g>
"#,
            PALETTE[i % PALETTE.len()],
            lx + 18.0,
            ly + 10.0
        );
    }
    s + "</svg>\n"
}

/// Writes the traces as libCacheSim `oracleGeneral` files and a manifest (see the module
/// docs).
fn export(dir: &Path, traces: &[Trace], spec: &Spec, size: Size, seed: u64) -> LabResult<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir).map_err(|e| crate::lab_err!("creating {}: {e}", dir.display()))?;
    let mut entries = Vec::new();
    for &t in traces {
        let trace = t.generate(spec, seed);
        let mut next = vec![-1i64; trace.len()];
        let mut seen = crate::policy::FastMap::<u64, usize>::default();
        for (i, &b) in trace.iter().enumerate().rev() {
            if let Some(n) = seen.insert(b, i) {
                next[i] = n as i64;
            }
        }
        let file = format!("{}.oracleGeneral", t.name());
        let path = dir.join(&file);
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&path)
                .map_err(|e| crate::lab_err!("creating {}: {e}", path.display()))?,
        );
        for (i, &b) in trace.iter().enumerate() {
            out.write_all(&(i as u32).to_le_bytes())?;
            out.write_all(&b.to_le_bytes())?;
            out.write_all(&1u32.to_le_bytes())?;
            out.write_all(&next[i].to_le_bytes())?;
        }
        out.flush()?;
        entries.push(json!({
            "trace": t.name(),
            "file": file,
            "reads": trace.len(),
        }));
    }
    let manifest = json!({
        "size": size.name(),
        "seed": seed,
        "file_blocks": spec.blocks,
        "capacity_blocks": spec.capacity,
        "format": "oracleGeneral: u32 time, u64 block, u32 size (1), i64 next read index or -1; little endian, packed",
        "traces": entries,
    });
    let mpath = dir.join("manifest.json");
    std::fs::write(&mpath, serde_json::to_string_pretty(&manifest)? + "\n")
        .map_err(|e| crate::lab_err!("writing {}: {e}", mpath.display()))?;
    println!(
        "policy: {} traces written to {}",
        traces.len(),
        dir.display()
    );
    Ok(())
}

impl Args {
    /// The value of a row of `report` (for tests): `variant`'s miss ratio on `trace`.
    pub fn row_value(report: &Report, variant: &str, trace: &str) -> Option<f64> {
        let mut extra = Map::new();
        extra.insert("trace".into(), Value::from(trace));
        report.row(variant, 1, METRIC, &extra).map(|r| r.median)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scenario's smoke run: two small traces through every contender, rows for each,
    /// the checks hold and the report is valid.
    #[test]
    fn smoke_run_on_two_traces() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("policy.json");
        let args = Args {
            common: CommonArgs {
                quick: true,
                json: Some(json.clone()),
                no_progress: true,
                ..CommonArgs::default()
            },
            traces: vec!["zipf-0.99".into(), "loop-1.25x-noise".into()],
            seed: DEFAULT_SEED,
            export: None,
        };
        let report = run(&args).unwrap();
        assert!(report.all_checks_ok(), "{:?}", report.checks);
        assert!(report.problems().is_empty(), "{:?}", report.problems());
        for v in [
            "foliocache",
            "foliocache-two-list",
            "foliocache-readahead",
            "lru",
            "belady-opt",
            "moka",
        ] {
            let m = Args::row_value(&report, v, "loop-1.25x-noise").unwrap();
            assert!((0.0..=100.0).contains(&m), "{v}: {m}");
        }
        // The protected policy (the block cache's) keeps most of a noisy loop that the two
        // lists cycle through.
        let row = |v| Args::row_value(&report, v, "loop-1.25x-noise").unwrap();
        assert!(
            row("foliocache") + 20.0 < row("foliocache-two-list"),
            "protected {}, two lists {}",
            row("foliocache"),
            row("foliocache-two-list")
        );
        assert!(Args::row_value(&report, "foliocache-readahead", "zipf-0.99").is_none());
        assert!(json.with_extension("svg").exists());
        let (_, problems) = Report::validate_file(&json).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
    }
}
