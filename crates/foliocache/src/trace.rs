//! The `tracing` feature: spans over the cache's slow paths and events for its rare counters,
//! through [`tracing`](https://docs.rs/tracing), named like the vmstat counters they go with.
//!
//! A hit is never traced (it must stay a handful of uncontended atomics). What is:
//!
//! | span (`DEBUG`) | around | fields |
//! |---|---|---|
//! | `sync_readahead` | a miss's synchronous readahead window | `index`, `pages` |
//! | `async_readahead` | a window started by a reader reaching the readahead mark | `index` |
//! | `single_page_reads` | a miss read without readahead | `index` |
//! | `syncs` | `sync_data` / `sync_all` / `sync_range` | `path`, `datasync` |
//! | `writeback_pages` | one writeback pass over a file (sync, flusher, throttled writer) | `path` |
//! | `lru_reclaim_runs` | one reclaim pass | `nr_pages` |
//!
//! Events carry the counter's name in `counter` and the count in `n`: `WARN` for
//! `io_errors` and `writeback_errors` (inside the span of the path that met them, so the
//! file is in the span's fields), `DEBUG` for `revalidations`, `inodes_evicted`,
//! `out_of_memory`, `dirty_throttled` and `readahead_fallbacks`. Without the feature the
//! macros expand to nothing.

/// Enters a `DEBUG` span named `$name` until the end of the enclosing block (nothing without
/// the `tracing` feature).
macro_rules! span {
    ($name:literal $(, $($field:tt)+)?) => {
        #[cfg(feature = "tracing")]
        let _span = ::tracing::debug_span!($name $(, $($field)+)?).entered();
    };
}
pub(crate) use span;

#[cfg(all(test, feature = "tracing"))]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use crate::io::{FaultyBacking, MemBacking};
    use crate::{Config, FolioCache, OpenOptions};

    /// A collector of span names and of events' `counter` fields and levels.
    #[derive(Default)]
    struct Seen {
        spans: Mutex<Vec<&'static str>>,
        events: Mutex<Vec<(tracing::Level, String)>>,
        next: AtomicU64,
    }

    struct CounterField(String);

    impl Visit for CounterField {
        fn record_str(&mut self, field: &Field, value: &str) {
            if field.name() == "counter" {
                self.0 = value.to_owned();
            }
        }
        fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
    }

    struct Collector(Arc<Seen>);

    impl Subscriber for Collector {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            self.0.spans.lock().unwrap().push(span.metadata().name());
            Id::from_u64(self.0.next.fetch_add(1, Ordering::Relaxed) + 1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut v = CounterField(String::new());
            event.record(&mut v);
            let level = *event.metadata().level();
            self.0.events.lock().unwrap().push((level, v.0));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn slow_paths_open_spans_and_errors_are_warnings_named_like_their_counters() {
        let seen = Arc::new(Seen::default());
        let dir = tempfile::tempdir().unwrap();
        tracing::subscriber::with_default(Collector(seen.clone()), || {
            let cache = FolioCache::new(Config::new(1 << 20)).unwrap();
            let path = dir.path().join("f");
            let f = cache
                .open_with(&path, OpenOptions::new().write(true).create(true))
                .unwrap();
            f.write_all_at(&[1u8; 3 * 4096], 0).unwrap();
            f.sync_data().unwrap();
            drop(f);
            let bad = FaultyBacking::new(MemBacking(vec![0u8; 64 * 4096]));
            bad.fail_at(40 * 4096);
            let g = cache.open_backing("bad", bad).unwrap();
            let mut buf = [0u8; 100];
            g.read_at(&mut buf, 0).unwrap(); // a cold read: a readahead window
            assert!(g.read_at(&mut buf, 40 * 4096).is_err());
        });
        let spans = seen.spans.lock().unwrap();
        for name in ["syncs", "writeback_pages", "sync_readahead"] {
            assert!(spans.contains(&name), "{name} in {spans:?}");
        }
        let events = seen.events.lock().unwrap();
        assert!(
            events.contains(&(tracing::Level::WARN, "io_errors".to_owned())),
            "{events:?}"
        );
        assert!(
            events.iter().all(|(_, c)| c != "hits"),
            "a hit is never traced: {events:?}"
        );
    }
}
