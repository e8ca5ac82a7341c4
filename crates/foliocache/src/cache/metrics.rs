//! The `metrics` feature: the cache's counters exported through the
//! [`metrics`](https://docs.rs/metrics) facade, for whatever recorder the application installed
//! (Prometheus, StatsD, OpenTelemetry exporters).
//!
//! The cache counts into per-thread shards and sums them on demand, so it does not push on
//! every event: [`FolioCache::record_metrics`] reads a snapshot ([`FolioCache::vmstat`]) and
//! records each line, a counter set to its absolute value for an event count, a gauge for a
//! level (dirty pages, inodes, pages on each LRU list). Call it from the application's own
//! scrape or reporting loop.
//!
//! Names are the vmstat names with a `foliocache_` prefix (`foliocache_hits`,
//! `foliocache_lru_reclaimed`, `foliocache_workingset_refault`), labelled `cache` with the
//! name given, so several caches in one process stay apart.

use std::collections::HashSet;

use super::sb::FolioCache;
use super::stats::CacheStats;
use crate::mm::lru::{LruStats, WorkingsetStats};

/// The prefix of every metric name.
pub const METRIC_PREFIX: &str = "foliocache_";

impl FolioCache {
    /// Records every counter of the cache ([`FolioCache::vmstat`]) with the
    /// [`metrics`](https://docs.rs/metrics) crate's current recorder (Prometheus, StatsD,
    /// OpenTelemetry exporters): event counts as counters set to their absolute value, levels
    /// (dirty pages, inodes, pages on each LRU list) as gauges, each named
    /// `foliocache_<vmstat name>` and labelled `cache = <cache>`, so several caches in one
    /// process stay apart. The cache counts into per-thread shards and sums them on demand,
    /// so it pushes nothing by itself: call this from the application's scrape or reporting
    /// loop. Needs the `metrics` feature.
    ///
    /// ```
    /// # let cache = foliocache::FolioCache::new(foliocache::Config::new(1 << 20)).unwrap();
    /// // In the application's reporting loop, with a recorder installed:
    /// cache.record_metrics("block-cache");
    /// ```
    pub fn record_metrics(&self, cache: &str) {
        let gauges: HashSet<&str> = CacheStats::GAUGES
            .iter()
            .chain(LruStats::GAUGES)
            .chain(WorkingsetStats::GAUGES)
            .copied()
            .collect();
        for (name, value) in self.vmstat() {
            let key = format!("{METRIC_PREFIX}{name}");
            let label = ("cache", cache.to_owned());
            if gauges.contains(name) {
                metrics::gauge!(key, &[label]).set(value as f64);
            } else {
                metrics::counter!(key, &[label]).absolute(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder,
        SharedString, Unit,
    };

    use crate::{Config, FolioCache};

    /// What the recorder saw: the last value per (kind, name, cache label).
    #[derive(Default)]
    struct Seen(Mutex<HashMap<(char, String, String), f64>>);

    struct Handle {
        seen: Arc<Seen>,
        kind: char,
        key: Key,
    }

    impl Handle {
        fn store(&self, v: f64) {
            let label = self
                .key
                .labels()
                .find(|l| l.key() == "cache")
                .map(|l| l.value().to_owned())
                .unwrap_or_default();
            let k = (self.kind, self.key.name().to_owned(), label);
            self.seen.0.lock().unwrap().insert(k, v);
        }
    }

    impl CounterFn for Handle {
        fn increment(&self, _: u64) {
            panic!("the cache records absolute values");
        }
        fn absolute(&self, v: u64) {
            self.store(v as f64);
        }
    }

    impl GaugeFn for Handle {
        fn increment(&self, _: f64) {
            panic!("the cache sets gauges");
        }
        fn decrement(&self, _: f64) {
            panic!("the cache sets gauges");
        }
        fn set(&self, v: f64) {
            self.store(v);
        }
    }

    struct TestRecorder(Arc<Seen>);

    impl Recorder for TestRecorder {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(Arc::new(Handle {
                seen: self.0.clone(),
                kind: 'c',
                key: key.clone(),
            }))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(Arc::new(Handle {
                seen: self.0.clone(),
                kind: 'g',
                key: key.clone(),
            }))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn every_vmstat_line_is_recorded_once_with_its_kind_and_label() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 64 * 1024]).unwrap();
        let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
        let file = cache.open(&path).unwrap();
        let mut buf = [0u8; 100];
        for _ in 0..3 {
            file.read_exact_at(&mut buf, 0).unwrap();
        }
        let seen = Arc::new(Seen::default());
        let recorder = TestRecorder(seen.clone());
        metrics::with_local_recorder(&recorder, || cache.record_metrics("test"));
        let seen = seen.0.lock().unwrap();
        let vmstat = cache.vmstat();
        assert_eq!(seen.len(), vmstat.len(), "one metric per vmstat line");
        let get = |kind: char, name: &str| {
            seen.get(&(kind, format!("foliocache_{name}"), "test".to_owned()))
                .copied()
        };
        assert_eq!(get('c', "read_calls"), Some(3.0));
        assert!(get('c', "hits").is_some_and(|h| h >= 2.0));
        assert_eq!(get('g', "budget_pages"), Some(256.0));
        assert!(get('g', "lru_pages_inactive").is_some());
        assert!(get('g', "workingset_nodes").is_some());
        assert!(get('c', "lru_reclaimed").is_some());
        assert!(get('c', "workingset_refault").is_some());
    }
}
