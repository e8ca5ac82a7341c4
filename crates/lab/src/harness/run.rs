//! Running workers on pinned threads, and interleaving variants.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, RwLock};
use std::time::{Duration, Instant};

use super::stats::Summary;

/// Workers check the stop flag once per this many operations (a power of two), so the check
/// costs nothing measurable and stopping lags by microseconds.
pub const CHECK_EVERY: u64 = 256;

/// The most worker threads one measurement may ask for: `--threads` rejects more.
///
/// Start-up is bounded (every worker is spawned, pinned and parked before the clock starts,
/// then all are released at once), but stopping is not free: after the stop signal each worker
/// must be scheduled once more to see it, so a machine with `c` CPUs needs about
/// `threads / c` scheduler time slices to join them. At this cap on two CPUs that is about a
/// second per measurement; far above it the lab would measure the scheduler, not the cache.
pub const MAX_THREADS: usize = 1024;

/// What one multi-threaded measurement produced.
#[derive(Clone, Debug)]
pub struct ThreadRun<T> {
    /// The measurement window: from the moment the start gate opened (no worker had begun its
    /// body before) to the moment the stop signal was raised. Joining the workers afterwards
    /// is not part of it.
    pub elapsed: Duration,
    /// When the window began (the clock started, then the gate opened).
    pub started: Instant,
    /// Each worker's result, in worker order.
    pub results: Vec<T>,
    /// Whether every worker was pinned as asked (false if pinning was off or refused).
    pub pinned: bool,
}

impl<T> ThreadRun<T> {
    /// `count` events per second of this run's measurement window.
    pub fn rate(&self, count: u64) -> f64 {
        per_sec(count as f64, self.elapsed)
    }
}

impl ThreadRun<u64> {
    /// Sum of the workers' operation counts per second of the window.
    pub fn ops_per_sec(&self) -> f64 {
        self.rate(self.results.iter().sum())
    }
}

/// `count` per second of `elapsed` (a zero duration counts as one nanosecond).
pub fn per_sec(count: f64, elapsed: Duration) -> f64 {
    count / elapsed.as_secs_f64().max(1e-9)
}

/// Runs `threads` workers for `duration`, every one of them inside the timed window.
///
/// The protocol, so that a rate is work done inside the window divided by the window, even
/// with far more threads than CPUs:
///
/// 1. every worker is spawned; worker `i` pins itself to the `i`-th CPU of the affinity mask
///    (modulo its size) when `pin` is set, then reports ready on a barrier;
/// 2. behind the barrier it parks on a start gate (a lock the main thread holds for writing);
///    the main thread, once every worker is ready, reads the clock and only then opens the
///    gate, which wakes all workers at once (no hand-off chain whose tail would start late
///    while the head already runs);
/// 3. the main thread sleeps for `duration`, reads the clock (the end of the window) and
///    raises `stop`; joining the workers after that is not timed.
///
/// `body(i, &stop)` runs the worker's loop and returns its count (or other result). It must
/// check `stop` every [`CHECK_EVERY`] operations and return the count it has when it sees the
/// signal, so the work counted after the window's end is at most `CHECK_EVERY` operations per
/// worker: the count is sampled at the stop signal, not when the worker is joined. A worker
/// the scheduler never ran inside the window counts at most one such batch. A panicking
/// worker propagates its panic.
pub fn run_threads<T, F>(threads: usize, pin: bool, duration: Duration, body: F) -> ThreadRun<T>
where
    T: Send + 'static,
    F: Fn(usize, &AtomicBool) -> T + Send + Sync + 'static,
{
    let threads = threads.max(1);
    let body = Arc::new(body);
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(threads + 1));
    let gate = Arc::new(RwLock::new(()));
    let closed = gate.write().unwrap_or_else(|e| e.into_inner());
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let (body, stop, ready, gate) = (body.clone(), stop.clone(), ready.clone(), gate.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("lab-worker-{i}"))
                .spawn(move || {
                    let pinned = pin && foliocache::mm::sync::pin_to_cpu(i);
                    ready.wait();
                    drop(gate.read().unwrap_or_else(|e| e.into_inner()));
                    (body(i, &stop), pinned)
                })
                .expect("spawning a lab worker thread"),
        );
    }
    ready.wait();
    let started = Instant::now();
    drop(closed);
    std::thread::sleep(duration);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::with_capacity(threads);
    let mut pinned = pin;
    for h in handles {
        match h.join() {
            Ok((r, p)) => {
                results.push(r);
                pinned &= p;
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    ThreadRun {
        elapsed,
        started,
        results,
        pinned,
    }
}

/// Collects samples of several variants measured in interleaved rounds.
///
/// For every key (variant, thread count, metric) it keeps all samples; [`Interleaver::rounds`]
/// drives the A B A B order. Samples are stored as they come, so a scenario can record several
/// metrics from one measurement.
#[derive(Debug, Default)]
pub struct Interleaver {
    samples: BTreeMap<(String, usize, String), Vec<f64>>,
    order: Vec<(String, usize, String)>,
}

impl Interleaver {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls `measure(variant, round)` for every variant, `runs` times, in the order
    /// v0 v1 v2 v0 v1 v2 ... The closure records what it measured with [`Interleaver::add`]
    /// (it receives `self`). `tick` is called after each measurement (progress).
    pub fn rounds<V, E>(
        &mut self,
        variants: &[V],
        runs: usize,
        mut measure: impl FnMut(&mut Self, &V, usize) -> Result<(), E>,
        mut tick: impl FnMut(),
    ) -> Result<(), E> {
        for round in 0..runs {
            for v in variants {
                measure(self, v, round)?;
                tick();
            }
        }
        Ok(())
    }

    /// Records one sample.
    pub fn add(&mut self, variant: &str, threads: usize, metric: &str, value: f64) {
        let key = (variant.to_string(), threads, metric.to_string());
        if !self.samples.contains_key(&key) {
            self.order.push(key.clone());
        }
        self.samples.entry(key).or_default().push(value);
    }

    /// The summary of one key, if it has samples.
    pub fn summary(&self, variant: &str, threads: usize, metric: &str) -> Option<Summary> {
        self.samples
            .get(&(variant.to_string(), threads, metric.to_string()))
            .and_then(|s| Summary::of(s))
    }

    /// Every key with its summary, in first-recorded order.
    pub fn summaries(&self) -> impl Iterator<Item = (&str, usize, &str, Summary)> + '_ {
        self.order.iter().filter_map(move |k| {
            Summary::of(&self.samples[k]).map(|s| (k.0.as_str(), k.1, k.2.as_str(), s))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_start_together_and_stop() {
        let run = run_threads(2, false, Duration::from_millis(30), |i, stop| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                std::hint::black_box(i);
            }
            n
        });
        assert_eq!(run.results.len(), 2);
        assert!(run.results.iter().all(|&n| n > 0));
        assert!(run.elapsed >= Duration::from_millis(30));
        assert!(run.ops_per_sec() > 0.0);
        assert!(!run.pinned);
    }

    /// Regression (issue 16, finding 6): the clock started after the barrier released the
    /// workers and stopped after the last one was joined, so with more threads than CPUs the
    /// rate counted work done outside the window. Here every worker records when its body
    /// began; none may begin before the window, and a worker slow to see the stop signal (it
    /// sleeps before returning, as a descheduled thread would) must not stretch the window.
    #[test]
    fn workers_start_and_stop_with_the_clock() {
        let duration = Duration::from_millis(30);
        let slow_stop = Duration::from_millis(500);
        let run = run_threads(8, false, duration, move |_, stop| {
            let entered = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            std::thread::sleep(slow_stop);
            entered
        });
        let returned = Instant::now();
        for entered in &run.results {
            assert!(*entered >= run.started, "a worker began before the clock");
        }
        assert!(run.elapsed >= duration);
        // The window ended when the stop was raised: at least `slow_stop` before the join.
        assert!(
            returned - (run.started + run.elapsed) >= slow_stop,
            "the window includes the join: {:?}",
            run.elapsed
        );
    }

    #[test]
    fn rounds_interleave_variants() {
        let mut il = Interleaver::new();
        let mut seen = Vec::new();
        il.rounds::<_, ()>(
            &["a", "b"],
            3,
            |il, v, round| {
                seen.push(format!("{v}{round}"));
                il.add(v, 1, "x", round as f64);
                Ok(())
            },
            || {},
        )
        .unwrap();
        assert_eq!(seen, ["a0", "b0", "a1", "b1", "a2", "b2"]);
        let s = il.summary("b", 1, "x").unwrap();
        assert_eq!((s.median, s.runs), (1.0, 3));
        assert_eq!(il.summaries().count(), 2);
    }
}
