//! The lab's reference policies against libCacheSim's figures on the same traces.
//!
//! `tests/data/libcachesim_reference.json` holds the miss ratios libCacheSim (the Python
//! package `libcachesim`, version recorded in the file) gave on the `policy` scenario's
//! quick-size traces, written by `crates/lab/scripts/libcachesim_reference.py`. This test
//! regenerates the same traces (same seed, same sizes), replays them through the lab's
//! policies and requires each to be within half a point of libCacheSim's figure. It needs
//! no Python.
//!
//! W-TinyLFU is compared in libCacheSim's variant ([`WTinyLfu::libcachesim`]: what its
//! frequencies count); the `policy` scenario's `w-tinylfu` row counts as Caffeine does, and
//! the test reports how far that one is from libCacheSim's figure without failing on it.
//! Belady's optimum is compared one way: the lab's may decline to admit a block (the true
//! optimum), libCacheSim's admits every miss, so the lab's must miss no more.

use foliocache_lab::policy::traces::{Size, Trace};
use foliocache_lab::policy::{replay, Kind, Policy};
use serde_json::Value;

/// The largest difference accepted, in points of miss ratio.
const TOLERANCE: f64 = 0.5;

/// Pairs (trace, policy) not yet within [`TOLERANCE`], each with the gap it must stay
/// within, so a change that widens it still fails. W-TinyLFU on loops: libCacheSim's
/// counting Bloom filter is sized for main's ~1,000 blocks while every block of the trace is
/// counted, so its estimates are mostly collisions; on a pure loop every block's true count
/// is the same and admission is decided by those collisions alone, i.e. by libCacheSim's
/// hash functions (XXH64 with its seeds), which the lab does not reproduce. On the Zipf and
/// mixed traces, where true counts differ, the lab's variant is within 0.5 points.
const KNOWN_GAPS: &[(&str, &str, f64)] = &[
    ("loop-1.1x", "w-tinylfu", 5.0),
    ("loop-1.25x", "w-tinylfu", 5.5),
    ("loop-1.25x-noise", "w-tinylfu", 1.0),
];

fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/libcachesim_reference.json"
    );
    let text = std::fs::read_to_string(path).expect("the reference file is committed");
    serde_json::from_str(&text).expect("the reference file is JSON")
}

#[test]
fn policies_match_libcachesim() {
    let r = reference();
    assert_eq!(r["size"], "quick");
    let spec = Size::Quick.spec();
    assert_eq!(r["capacity_blocks"].as_u64(), Some(spec.capacity as u64));
    assert_eq!(r["file_blocks"].as_u64(), Some(spec.blocks));
    let seed = r["seed"].as_u64().expect("a seed");
    let figures = r["miss_ratio_pct"].as_object().expect("figures by trace");
    assert!(!figures.is_empty());
    let mut failures = Vec::new();
    for (name, theirs) in figures {
        let t = Trace::parse(name).unwrap_or_else(|| panic!("unknown trace {name}"));
        let trace = t.generate(&spec, seed);
        for (variant, want) in theirs.as_object().expect("figures by policy") {
            let want = want.as_f64().expect("a number");
            let mut p: Box<dyn Policy> = match variant.as_str() {
                "w-tinylfu" => Box::new(foliocache_lab::policy::tinylfu::WTinyLfu::libcachesim(
                    spec.capacity,
                )),
                v => {
                    let k = Kind::ALL
                        .into_iter()
                        .find(|k| k.name() == v)
                        .unwrap_or_else(|| panic!("unknown policy {v}"));
                    k.build(spec.capacity, &trace)
                }
            };
            let got = replay(p.as_mut(), &trace).miss_pct();
            let tolerance = KNOWN_GAPS
                .iter()
                .find(|g| g.0 == name && g.1 == variant)
                .map_or(TOLERANCE, |g| g.2);
            let ok = if variant == "belady-opt" {
                got <= want + 1e-9
            } else {
                (got - want).abs() <= tolerance
            };
            println!(
                "{name:18} {variant:11} lab {got:7.3}  libCacheSim {want:7.3}  {:+.3}{}",
                got - want,
                match (ok, tolerance > TOLERANCE) {
                    (false, _) => "  <- off",
                    (true, true) => "  (known gap)",
                    (true, false) => "",
                }
            );
            if variant == "w-tinylfu" {
                let caffeine = Kind::WTinyLfu.run(spec.capacity, &trace).miss_pct();
                println!(
                    "{name:18} {:11} lab {caffeine:7.3}  (Caffeine's counting, {:+.3} from libCacheSim)",
                    "w-tinylfu", caffeine - want
                );
            }
            if !ok {
                failures.push(format!(
                    "{name} {variant}: lab {got:.3}, libCacheSim {want:.3}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
