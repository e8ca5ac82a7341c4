//! `refcount`: Pedro Falcato's primitive benchmark from seed 000 (folio refcount scalability).
//!
//! Every worker thread loops on one get + put pair on ONE shared counter, the way concurrent
//! `pread`s of one cached page hit that page's folio count. The counter starts at 1 (the page
//! cache's own reference), so no put is ever the last and no get should ever fail. Four
//! primitives are measured, interleaved A B C D A B C D ... in one process, at every thread
//! count asked, `--runs` times; tables show medians.
//!
//! The pair is run through the monomorphic [`RefOps`] functions (no strategy dispatch in the
//! loop) so the lab measures the protocol, as the seed's microbenchmark did.
//!
//! Output: (a) the primitive table, nanoseconds per pair per thread and pairs per second for
//! each primitive; (b) the seed's table shape, `#threads | cas-loop (vanilla) | locked-bit
//! (patched) | boost (%) | optimistic`, for `ops_per_sec`.
//!
//! Stable names (see `docs/LAB-RESULTS.md`):
//!
//! | kind | names |
//! |---|---|
//! | variants | `fetch-add` (plain `fetch_add` + `fetch_sub`, the floor), `cas-loop`, `optimistic`, `locked-bit` |
//! | metrics | `ops_per_sec` (get+put pairs per second, all threads), `ns_per_op` (wall nanoseconds per pair per thread: `threads / ops_per_sec`) |
//! | comparisons | baseline `cas-loop`, candidates `locked-bit` and `optimistic`, metric `ops_per_sec`, one per thread count |
//! | checks | `final_count_balanced` (after every run the counter is back to 1, its initial value), `no_failed_gets` (no `try_get` failed on the held folio) |
//!
//! The seed's real workload (`pread` of 64 bytes at offset 0 of one cached file through the
//! page cache) is the scenario `pread`, which uses the same strategies inside the cache.
//!
//! This module is the template for the others: `NAME`, `SEED`, `ABOUT`, `Args` flattening
//! [`CommonArgs`], `run(&Args)`, `scenario!()` implementing [`super::Scenario`] with them;
//! in `run`, a [`Bench`] measured with one closure (one variant at one thread count, timed
//! with [`run_threads`]), then comparisons, checks, tables and [`Bench::finish`].

use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};
use std::sync::Arc;

use clap::Args as ClapArgs;
use foliocache::mm::refcount::{CasLoop, LockedBit, Optimistic, RefCount, RefOps, RefStrategy};
use foliocache::mm::sync::{AtomicU32, CachePadded, Ordering};
use serde_json::{json, Map};

use crate::harness::{
    fmt_num, run_threads, seed_order, seed_table, Bench, CommonArgs, LabResult, Report, Table, CHECK_EVERY,
};

/// The seed this scenario reproduces.
pub const SEED: &str = "000_b7e69cdd1cb63f8c.txt";

/// The scenario name (subcommand).
pub const NAME: &str = "refcount";

/// One line for `all` and the summary.
pub const ABOUT: &str = "get+put pairs on one shared folio count: fetch-add, cas-loop, \
optimistic, locked-bit (Pedro Falcato's microbenchmark)";

/// Options of `foliocache-lab refcount`.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct Args {
    /// Options every scenario takes.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// A primitive under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Primitive {
    /// Plain `fetch_add` + `fetch_sub` on an `AtomicU32`: what any shared counter costs.
    FetchAdd,
    /// A folio refcount strategy: `try_get` + `put`.
    Ref(RefStrategy),
}

/// The seed's vanilla strategy, the tables' baseline.
const VANILLA: RefStrategy = RefStrategy::CasLoop;

/// The seed's patched strategy.
const PATCHED: RefStrategy = RefStrategy::LockedBit;

impl Primitive {
    /// The floor, then every strategy of [`RefStrategy::ALL`] in its order.
    fn all() -> Vec<Primitive> {
        std::iter::once(Primitive::FetchAdd)
            .chain(RefStrategy::ALL.into_iter().map(Primitive::Ref))
            .collect()
    }

    fn name(self) -> &'static str {
        match self {
            Primitive::FetchAdd => "fetch-add",
            Primitive::Ref(s) => s.name(),
        }
    }
}

/// The shared counter of one measurement, alone on its cache line.
enum Counter {
    Plain(CachePadded<AtomicU32>),
    Folio(CachePadded<RefCount>, RefStrategy),
}

impl Counter {
    /// A counter holding the page cache's one reference.
    fn new(p: Primitive) -> Counter {
        match p {
            Primitive::FetchAdd => Counter::Plain(CachePadded::new(AtomicU32::new(1))),
            Primitive::Ref(s) => {
                let rc = CachePadded::new(RefCount::frozen());
                rc.init(s, 1);
                Counter::Folio(rc, s)
            }
        }
    }

    /// The raw word, for the balance check.
    fn raw(&self) -> u32 {
        match self {
            Counter::Plain(a) => a.load(Ordering::Relaxed),
            Counter::Folio(rc, _) => rc.raw(),
        }
    }

    /// One worker's loop: pairs until `stop`; returns (pairs done, failed gets).
    fn work(&self, stop: &AtomicBool) -> (u64, u64) {
        match self {
            Counter::Plain(a) => plain_loop(a, stop),
            Counter::Folio(rc, RefStrategy::CasLoop) => folio_loop::<CasLoop>(rc, stop),
            Counter::Folio(rc, RefStrategy::Optimistic) => folio_loop::<Optimistic>(rc, stop),
            Counter::Folio(rc, RefStrategy::LockedBit) => folio_loop::<LockedBit>(rc, stop),
            Counter::Folio(_, s) => panic!("refcount: no loop for the strategy {s}"),
        }
    }
}

fn plain_loop(a: &AtomicU32, stop: &AtomicBool) -> (u64, u64) {
    let mut n = 0u64;
    loop {
        for _ in 0..CHECK_EVERY {
            // ORDERING: Acquire/Release mirror the refcount's get (acquire) and put (release),
            // so the floor pays the same (free, on x86) ordering as the strategies.
            a.fetch_add(1, Ordering::Acquire);
            std::hint::black_box(a.fetch_sub(1, Ordering::Release));
        }
        n += CHECK_EVERY;
        if stop.load(StdOrdering::Relaxed) {
            return (n, 0);
        }
    }
}

fn folio_loop<T: RefOps>(rc: &RefCount, stop: &AtomicBool) -> (u64, u64) {
    let (mut n, mut failed) = (0u64, 0u64);
    loop {
        for _ in 0..CHECK_EVERY {
            if T::try_get(rc) {
                // The cache's reference is still there: this put is never the last.
                std::hint::black_box(T::put(rc));
            } else {
                failed += 1;
            }
        }
        n += CHECK_EVERY;
        if stop.load(StdOrdering::Relaxed) {
            return (n, failed);
        }
    }
}

super::scenario!();

/// Runs the scenario: measures, prints both tables, writes JSON and plot if asked.
pub fn run(args: &Args) -> LabResult<Report> {
    let settings = args.common.settings();
    let primitives = Primitive::all();
    let mut bench = Bench::new(
        NAME,
        SEED,
        &settings,
        json!({
            "variants": primitives.iter().map(|p| p.name()).collect::<Vec<_>>(),
            "pair": "try_get + put on one shared counter holding 1 reference",
        }),
        primitives.len(),
    );
    let mut unbalanced = Vec::new();
    let mut failed_gets = 0u64;
    let mut total_pairs = 0u64;
    let none = Map::new();
    bench.measure("", &primitives, &none, |il, &p, threads, _round| {
        let counter = Arc::new(Counter::new(p));
        let c = counter.clone();
        let run = run_threads(threads, settings.pin, settings.duration, move |_, stop| {
            c.work(stop)
        });
        let pairs: u64 = run.results.iter().map(|r| r.0).sum();
        failed_gets += run.results.iter().map(|r| r.1).sum::<u64>();
        total_pairs += pairs;
        let ops = run.rate(pairs);
        il.add(p.name(), threads, "ops_per_sec", ops);
        il.add(
            p.name(),
            threads,
            "ns_per_op",
            threads as f64 * 1e9 / ops.max(1e-9),
        );
        if counter.raw() != 1 {
            unbalanced.push(format!("{}@{threads}: {:#x}", p.name(), counter.raw()));
        }
        Ok(())
    })?;

    let report = &mut bench.report;
    // Every strategy against vanilla, the seed's patch first.
    let strategies = seed_order(VANILLA, PATCHED);
    for &threads in &settings.threads {
        for candidate in &strategies[1..] {
            report.compare(
                VANILLA.name(),
                candidate.name(),
                threads,
                "ops_per_sec",
                &none,
            );
        }
    }
    report.check(
        "final_count_balanced",
        json!(unbalanced.len()),
        unbalanced.is_empty(),
    );
    if !unbalanced.is_empty() {
        eprintln!(
            "refcount: counters not back to 1: {}",
            unbalanced.join(", ")
        );
    }
    report.check("no_failed_gets", json!(failed_gets), failed_gets == 0);
    report.stats = Some(json!({ "pairs": total_pairs, "failed_gets": failed_gets }));

    let tables = vec![
        (
            format!(
                "Primitive costs: one get+put pair per iteration on one shared counter \
                 (medians of {} runs of {:?})",
                settings.runs, settings.duration
            ),
            primitive_table(report, &settings.threads),
        ),
        (
            format!(
                "Seed 000 shape: get+put pairs per second (ops_per_sec), vanilla = {VANILLA}, \
                 patched = {PATCHED}"
            ),
            seed_table(
                report,
                "ops_per_sec",
                VANILLA.name(),
                PATCHED.name(),
                &strategies[2..].iter().map(|s| s.name()).collect::<Vec<_>>(),
                &none,
            ),
        ),
    ];
    bench.finish(&settings, &tables, Some(("ops_per_sec", &none)))
}

/// `#threads | primitive | ns/op | ops/s | vs cas-loop (%)`, one line per primitive.
fn primitive_table(report: &Report, threads: &[usize]) -> Table {
    let none = Map::new();
    let vs = format!("vs {VANILLA} (%)");
    let mut t = Table::new(["#threads", "primitive", "ns/op", "ops/s", vs.as_str()]);
    for &n in threads {
        let base = report
            .row(VANILLA.name(), n, "ops_per_sec", &none)
            .map(|r| r.median);
        for p in Primitive::all() {
            let ns = report
                .row(p.name(), n, "ns_per_op", &none)
                .map(|r| r.median);
            let ops = report
                .row(p.name(), n, "ops_per_sec", &none)
                .map(|r| r.median);
            let vs = match (ops, base) {
                (Some(o), Some(b)) if b > 0.0 => format!("{:+.1}", (o / b - 1.0) * 100.0),
                _ => "-".into(),
            };
            t.row([
                n.to_string(),
                p.name().to_string(),
                ns.map_or("-".into(), |v| format!("{v:.2}")),
                ops.map_or("-".into(), fmt_num),
                vs,
            ]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn names_are_the_strategies() {
        let names: Vec<_> = Primitive::all().into_iter().map(Primitive::name).collect();
        assert_eq!(names, ["fetch-add", "cas-loop", "optimistic", "locked-bit"]);
        for s in RefStrategy::ALL {
            assert!(names.contains(&s.name()));
        }
    }

    #[test]
    fn a_tiny_run_is_balanced_and_compares() {
        let args = Args {
            common: CommonArgs {
                threads: Some(crate::harness::parse_threads("1,2").unwrap()),
                duration: Some(Duration::from_millis(10)),
                runs: Some(1),
                no_pin: true,
                no_progress: true,
                ..CommonArgs::default()
            },
        };
        let r = run(&args).unwrap();
        assert!(r.all_checks_ok(), "{:?}", r.checks);
        assert!(
            r.checks
                .iter()
                .any(|c| c.name == crate::harness::RATE_CHECK),
            "every report carries the CPU bound on its rates"
        );
        assert_eq!(r.comparisons.len(), 4);
        assert!(r
            .comparisons
            .iter()
            .all(|c| c.baseline == "cas-loop" && c.metric == "ops_per_sec"));
        assert_eq!(r.rows.len(), 2 * 4 * 2);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
    }
}
