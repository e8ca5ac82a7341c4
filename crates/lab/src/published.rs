//! The seeds' published figures, quoted as facts beside our measurements in the `all` report.
//!
//! Each entry names the seed file it comes from (`docs/SEEDS.md` maps the names to the
//! upstream threads) and the hardware it was measured on, so a reader can put our table and
//! theirs side by side. Nothing here is used in a computation.
//!
//! Where a seed prints numbers that map onto one of our comparisons, [`Published::points`]
//! carries them as boosts in the lab's orientation (`(ratio - 1) * 100`, above 0 = candidate
//! better), so the plots overlay them on the measured curve. A seed's runtime change `c` %
//! (negative is better) becomes the boost `(1 / (1 + c / 100) - 1) * 100`; a time per
//! operation `a` ns against baseline `b` ns becomes `(b / a - 1) * 100`.

/// Published figures for one scenario.
pub struct Published {
    /// Scenario name.
    pub scenario: &'static str,
    /// Seed file quoted.
    pub seed: &'static str,
    /// What was measured and on what, then the figures (markdown).
    pub text: &'static str,
    /// The machine the [`points`](Published::points) come from, for the plots' legends.
    pub machine: &'static str,
    /// The figures that map onto one of the scenario's comparisons (may be empty).
    pub points: &'static [Point],
}

/// One published figure, as a boost of `candidate` over `baseline` on `metric`.
#[derive(Clone, Copy, Debug)]
pub struct Point {
    /// The lab's candidate variant the seed's patched side corresponds to.
    pub candidate: &'static str,
    /// The lab's baseline variant the seed's vanilla side corresponds to.
    pub baseline: &'static str,
    /// The lab's metric.
    pub metric: &'static str,
    /// Extra identifying fields the figure applies to (`benchmark` ...); empty for any.
    pub extra: &'static [(&'static str, &'static str)],
    /// The thread count, when the seed gives one.
    pub threads: Option<usize>,
    /// `(ratio - 1) * 100`, oriented as [`crate::harness::Comparison::boost_pct`].
    pub boost_pct: f64,
}

/// A published point at `threads` on `ops_per_sec`, with no extra fields.
const fn ops(
    candidate: &'static str,
    baseline: &'static str,
    threads: usize,
    boost_pct: f64,
) -> Point {
    Point {
        candidate,
        baseline,
        metric: "ops_per_sec",
        extra: &[],
        threads: Some(threads),
        boost_pct,
    }
}

/// A published runtime change of seed 002 for one benchmark (one process), already converted
/// to a boost of `rmap-id` over `none` (the seed's `all` row is every optimisation on).
const fn cow(extra: &'static [(&'static str, &'static str)], boost_pct: f64) -> Point {
    Point {
        candidate: "rmap-id",
        baseline: "none",
        metric: "runtime_ms",
        extra,
        threads: Some(1),
        boost_pct,
    }
}

/// Every scenario's published reference figures.
pub const PUBLISHED: &[Published] = &[
    Published {
        scenario: "refcount",
        seed: "000_b7e69cdd1cb63f8c.txt",
        text: "Pedro Falcato's microbenchmark (get+put on one shared counter), AMD Ryzen 7 PRO 7840U \
(zen4): xadd 2.76 ns at 1 thread, 42.1 ns at 4, 84.8 ns at 8; load+cmpxchg loop 3.12 / 51.1 / \
112 ns; optimistic cmpxchg 2.95 / 56.2 / 140 ns. The optimistic variant degrades faster than \
the plain CAS loop under contention.",
        machine: "Ryzen 7 PRO 7840U",
        // cmpxchg loop against optimistic cmpxchg, ns per pair: 3.12/2.95, 51.1/56.2, 112/140.
        points: &[
            ops("optimistic", "cas-loop", 1, 5.8),
            ops("optimistic", "cas-loop", 4, -9.1),
            ops("optimistic", "cas-loop", 8, -20.0),
        ],
    },
    Published {
        scenario: "pread",
        seed: "000_b7e69cdd1cb63f8c.txt",
        text: "will-it-scale-style `pread(fd, buf, 64, 0)` on one tmpfs file, N pinned threads, \
v6.15, 2 x E5-2690 v3 (12C each, no SMT): 1 thread 1,343,381 -> 1,344,401 ops/s (+0.1%); \
2 threads +12.3%; 5 threads +15.7%; 10 threads +28.1%; 12 threads +25.5%; across sockets \
+35.0% (14) to +94.7% (24). 2 x AMD EPYC 9654: +0.4% at 1 thread, +9.2% at 5, +26.9% at 97, \
+74.7% at 353.",
        machine: "2 x E5-2690 v3",
        points: &[
            ops("locked-bit", "cas-loop", 1, 0.1),
            ops("locked-bit", "cas-loop", 2, 12.3),
            ops("locked-bit", "cas-loop", 5, 15.7),
            ops("locked-bit", "cas-loop", 10, 28.1),
            ops("locked-bit", "cas-loop", 12, 25.5),
            ops("locked-bit", "cas-loop", 14, 35.0),
            ops("locked-bit", "cas-loop", 16, 81.3),
            ops("locked-bit", "cas-loop", 18, 73.2),
            ops("locked-bit", "cas-loop", 20, 92.1),
            ops("locked-bit", "cas-loop", 24, 94.7),
        ],
    },
    Published {
        scenario: "readseq",
        seed: "001_1b60c5657c9329ae.txt",
        text: "RocksDB `db_bench readseq`, 32 threads, 32 DBs, 8 KiB values, 32-vCPU Intel Ice Lake, \
v6.19-rc5: throughput 1.51x; latency P50 6.15 -> 2.22 us (-63.9%), P75 13.38 -> 7.75 us \
(-42.1%), P99 507.95 -> 348.54 us (-31.4%).",
        machine: "32-vCPU Ice Lake",
        // 1.51x throughput; P99 507.95 -> 348.54 us is 1.457x.
        points: &[
            ops("batched", "single", 32, 51.0),
            Point {
                metric: "p99_latency_ns",
                ..ops("batched", "single", 32, 45.7)
            },
        ],
    },
    Published {
        scenario: "cow",
        seed: "002_c6097cf048dbb657.txt",
        text: "% runtime change against the baseline kernel (negative is better), Intel Xeon Silver \
4210R (2 x 10 cores), all optimisations (`all` row): remap -34.8%, munmap +1.0%, fork +27.8%, \
cow +0.7%, cow-byte +0.4%, cow-reuse -30.0%, cow-reuse-byte -63.9%, pte-dontneed -0.5%. \
AMD EPYC 7313 (2 x 16): remap -21.8%, munmap +16.1%, fork +43.0%, cow-reuse -50.2%, \
cow-reuse-byte -60.8%.",
        machine: "Xeon Silver 4210R",
        // The `all` row's runtime changes: -34.8, +1.0, +27.8, +0.7, +0.4, -30.0, -63.9, -0.5 %.
        points: &[
            cow(&[("benchmark", "remap")], 53.4),
            cow(&[("benchmark", "munmap")], -1.0),
            cow(&[("benchmark", "fork")], -21.8),
            cow(&[("benchmark", "cow")], -0.7),
            cow(&[("benchmark", "cow-byte")], -0.4),
            cow(&[("benchmark", "cow-reuse")], 42.9),
            cow(&[("benchmark", "cow-reuse-byte")], 177.0),
            cow(&[("benchmark", "pte-dontneed")], 0.5),
        ],
    },
    Published {
        scenario: "hash",
        seed: "003_5f6e8bad98741a79.txt",
        text: "`perf bench futex hash -b 512` on PowerPC: immutable (no reference) 1,536,035 ops/s; \
the first per-CPU reference 8-10% below it; the follow-up fast path (preempt-disable, plain \
per-CPU increment) halves the gap to about 5%. The rcuref version it replaced ran at about \
1/5 of the baseline in one configuration (306,403 vs 1,559,643 ops/s).",
        machine: "PowerPC",
        // The first per-CPU reference ran 8-10% below no reference at all; no thread count.
        points: &[Point {
            threads: None,
            ..ops("percpu", "immutable", 1, -9.0)
        }],
    },
    Published {
        scenario: "lru",
        seed: "004_cf50064fd6b281c5.txt",
        text: "Meta production (Instagram, 60 hosts per side, ~95% CPU): dead folios entering the LRU \
fell from 1,297,785/min (6.7%) to 14/min (~0.0001%); about 2.6 M fewer lruvec lock acquisitions \
per minute per host; direct reclaim scanning -7%, allocation stalls -5.2%, compaction stalls \
-12.3%. The first version freed folios with PG_active still set (MGLRU fault-path adds): \
\"BUG: Bad page state\".",
        machine: "Meta production hosts",
        points: &[],
    },
    Published {
        scenario: "peers",
        seed: "none: the peers' own READMEs and PRs, collected in docs/research/anchors.md",
        text: "quick_cache README (mokabench, Intel i9-12900H): ARC trace S3 at 100K capacity, 6 \
clients, 0.798 s, about 20.6 M reads/s at a 12.84% hit ratio, against Mini Moka's 8.064 s (about \
2.0 M reads/s, 10.37%); trace DS1 at 8M capacity, 6 clients, about 19.5 M reads/s at 69.3% hits \
against Mini Moka's 12.294 s (65.8%). These are small-value in-memory traces with no file behind \
the misses; ours are 4 KiB blocks filled from a file. RocksDB's HyperClockCache (PR #10626, 24 \
cores / 48 threads, db_bench whole-database operations): 1 thread with a 1597 MB cache, LRU \
46.6 kops/s against the clock cache's 51.5 kops/s.",
        machine: "i9-12900H",
        points: &[],
    },
];

/// The published figures for `scenario`, if any.
pub fn for_scenario(scenario: &str) -> Option<&'static Published> {
    PUBLISHED.iter().find(|p| p.scenario == scenario)
}
