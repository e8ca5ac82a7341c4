//! Order statistics over the repetitions of one measurement, and the sanity bound every
//! report's throughput rows are held to.

use std::collections::BTreeMap;

use serde::Serialize;

use super::report::Row;

/// Median, minimum and maximum of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// The median (mean of the two middle samples for an even count).
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// How many samples.
    pub runs: usize,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none (or any is NaN).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|s| s.is_nan()) {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            runs: n,
        })
    }
}

/// The name of the check [`rates_beyond_cpus`] feeds, recorded in every scenario's report.
pub const RATE_CHECK: &str = "rate_within_cpus";

/// How far above `min(N, CPUs) x` the 1-thread rate an N-thread rate may go before the check
/// fails. N threads sharing `c` CPUs can at best run `min(N, c)` times as fast as one thread;
/// the slack covers what is honest on top of that (a 1-thread sample slowed by a neighbour, a
/// turbo clock, caches warmed by the first run). A rate past it means the measurement counted
/// work outside its window, not that the code scaled.
pub const RATE_SLACK: f64 = 1.5;

/// Whether `metric` is a throughput the workers' CPUs bound: operations or pages handled per
/// second (`ops_per_sec`, `pages_per_sec`, `insert_pages_per_sec`). Event rates that work
/// causes rather than does (reclaim scans, stalls) are left out.
pub fn is_throughput(metric: &str) -> bool {
    metric == "ops_per_sec" || metric.ends_with("pages_per_sec")
}

/// The shortest measurement window the check judges. Below it a window is a few scheduler
/// time slices: the 1-thread sample, measured first, pays the warm-up (page faults, clock
/// ramp-up) and any neighbour's burst, and the ratio says more about the machine than about
/// the lab. Shorter runs (smoke tests) record the check as not judged.
pub const RATE_MIN_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

/// The CPUs this process may run on (affinity mask and CPU quota), at least 1.
pub fn cpus_available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The throughput rows faster than `cpus` CPUs can go: for every (variant, metric, extra
/// fields) that has a 1-thread row, each row at N threads whose median exceeds
/// [`RATE_SLACK`] `x min(N, cpus) x` the 1-thread rate. The 1-thread rate taken is its best
/// sample (the one least slowed by anything else on the machine), so a noisy 1-thread run
/// does not fail the check. Returns one line per offender.
pub fn rates_beyond_cpus(rows: &[Row], cpus: usize) -> Vec<String> {
    let key = |r: &Row| {
        (
            r.variant.clone(),
            r.metric.clone(),
            serde_json::Value::Object(r.extra.clone()).to_string(),
        )
    };
    let single: BTreeMap<_, f64> = rows
        .iter()
        .filter(|r| r.threads == 1 && is_throughput(&r.metric))
        .map(|r| (key(r), r.max))
        .collect();
    rows.iter()
        .filter(|r| r.threads > 1 && is_throughput(&r.metric))
        .filter_map(|r| {
            let one = *single.get(&key(r))?;
            let bound = RATE_SLACK * r.threads.min(cpus.max(1)) as f64 * one;
            (one > 0.0 && r.median > bound).then(|| {
                format!(
                    "{} {} at {} threads: {:.4e} > {RATE_SLACK} x {} CPU(s) x {:.4e} (1 thread){}",
                    r.variant,
                    r.metric,
                    r.threads,
                    r.median,
                    r.threads.min(cpus.max(1)),
                    one,
                    if r.extra.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", serde_json::Value::Object(r.extra.clone()))
                    }
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_medians() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (2.0, 1.0, 3.0, 3));
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }

    fn row(variant: &str, threads: usize, metric: &str, median: f64) -> Row {
        Row {
            variant: variant.into(),
            threads,
            metric: metric.into(),
            median,
            min: median,
            max: median,
            runs: 1,
            extra: serde_json::Map::new(),
        }
    }

    /// Regression (issue 16, finding 6): 64 threads on 2 CPUs reported fetch-add at 3.4x to
    /// 10x its rate, every check "ok". A rate above what the CPUs can do must fail a check.
    #[test]
    fn a_rate_beyond_the_cpus_is_flagged() {
        let rows = [
            row("fetch-add", 1, "ops_per_sec", 100.0),
            row("fetch-add", 2, "ops_per_sec", 290.0),
            row("fetch-add", 64, "ops_per_sec", 295.0),
            row("cas-loop", 64, "ops_per_sec", 1e9), // no 1-thread row: not judged
            row("fetch-add", 64, "p99_latency_ns", 1e9), // not a throughput
        ];
        assert!(rates_beyond_cpus(&rows, 2).is_empty());
        let over = rates_beyond_cpus(&rows, 1);
        assert_eq!(over.len(), 2, "{over:?}");
        assert!(over[0].contains("at 2 threads"), "{over:?}");
        let mut other_mode = row("fetch-add", 2, "ops_per_sec", 1000.0);
        other_mode.extra.insert("mode".into(), "x".into());
        let rows = [rows[0].clone(), other_mode];
        assert!(rates_beyond_cpus(&rows, 2).is_empty(), "extra fields match");
        assert!(is_throughput("insert_pages_per_sec") && !is_throughput("alloc_stalls_per_sec"));
    }
}
