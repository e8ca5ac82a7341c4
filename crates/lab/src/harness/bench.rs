//! The measurement skeleton every scenario fills in.
//!
//! A scenario run is always the same frame around its own measurement: resolve the common
//! settings, open the `foliocache-lab/1` report with its parameters, show a progress bar,
//! measure every variant at every thread count in interleaved rounds (v0 v1 v2 v0 v1 v2 ...,
//! `--runs` times, so the drift of a noisy machine hits every variant alike), add a row per
//! (variant, threads, metric) with the median, minimum and maximum of its samples, and at the
//! end print the tables, write the JSON and the plot. [`Bench`] is that frame; the scenario
//! supplies one closure that measures one variant at one thread count and records what it
//! saw, then its comparisons, checks and tables.
//!
//! ```no_run
//! # use foliocache_lab::harness::{Bench, CommonArgs, LabResult, Report};
//! # use serde_json::{json, Map};
//! # fn measure(_: &str, _: usize) -> f64 { 0.0 }
//! fn run(common: &CommonArgs) -> LabResult<Report> {
//!     let settings = common.settings();
//!     let variants = ["vanilla", "patched"];
//!     let mut bench = Bench::new("example", "-", &settings, json!({}), variants.len());
//!     let none = Map::new();
//!     bench.measure("", &variants, &none, |il, &v, threads, _round| {
//!         il.add(v, threads, "ops_per_sec", measure(v, threads));
//!         Ok(())
//!     })?;
//!     for &n in &settings.threads {
//!         bench.report.compare("vanilla", "patched", n, "ops_per_sec", &none);
//!     }
//!     bench.finish(&settings, &[], Some(("ops_per_sec", &none)))
//! }
//! ```

use std::time::Duration;

use serde_json::{Map, Value};

use super::{emit, Interleaver, LabResult, Progress, Report, Settings, Table};

/// One scenario run: its report, filled as it measures, and its progress bar.
#[derive(Debug)]
pub struct Bench {
    /// The report: [`Bench::measure`] adds the rows; comparisons, checks and stats are the
    /// scenario's.
    pub report: Report,
    threads: Vec<usize>,
    runs: usize,
    progress: Progress,
}

impl Bench {
    /// Starts a run of `scenario` (reproducing `seed`): a report with the common parameters
    /// of `settings` and the scenario's `params` merged in, and a progress bar for
    /// `variants` variants measured at every thread count, `settings.runs` times, each
    /// measurement taking `settings.duration` (see [`Bench::with_steps`] for other shapes).
    pub fn new(
        scenario: &str,
        seed: &str,
        settings: &Settings,
        params: Value,
        variants: usize,
    ) -> Bench {
        let steps = (settings.threads.len() * settings.runs * variants) as u64;
        Bench::with_steps(scenario, seed, settings, params, steps, settings.duration)
    }

    /// The same with the progress bar's size given: `steps` measurements (calls of the
    /// [`Bench::measure`] closure and [`Bench::tick`]s) of about `per_step` each.
    pub fn with_steps(
        scenario: &str,
        seed: &str,
        settings: &Settings,
        params: Value,
        steps: u64,
        per_step: Duration,
    ) -> Bench {
        let expected = per_step.saturating_mul(u32::try_from(steps).unwrap_or(u32::MAX));
        Bench {
            report: Report::new(scenario, seed, settings.params(params)),
            threads: settings.threads.clone(),
            runs: settings.runs,
            progress: Progress::new(scenario, steps, expected, settings.progress),
        }
    }

    /// Measures every variant at every thread count of the settings: for each thread count
    /// `n`, `runs` interleaved rounds over `variants`, each calling
    /// `measure(samples, variant, n, round)`, which records what it measured with
    /// [`Interleaver::add`]. Then adds a row for every (variant, threads, metric) recorded,
    /// with the `extra` fields on each. `label` names the group on the progress line.
    pub fn measure<V>(
        &mut self,
        label: &str,
        variants: &[V],
        extra: &Map<String, Value>,
        measure: impl FnMut(&mut Interleaver, &V, usize, usize) -> LabResult<()>,
    ) -> LabResult<()> {
        let threads = self.threads.clone();
        self.measure_at(label, &threads, variants, extra, measure)
    }

    /// [`Bench::measure`] at the thread counts `threads` instead of the settings' (a part of
    /// a scenario with no thread axis measures at `&[1]`).
    pub fn measure_at<V>(
        &mut self,
        label: &str,
        threads: &[usize],
        variants: &[V],
        extra: &Map<String, Value>,
        mut measure: impl FnMut(&mut Interleaver, &V, usize, usize) -> LabResult<()>,
    ) -> LabResult<()> {
        let mut il = Interleaver::new();
        for &n in threads {
            self.progress.message(match label {
                "" => format!("{n} thread(s)"),
                _ => format!("{label}, {n} thread(s)"),
            });
            il.rounds(
                variants,
                self.runs,
                |il, v, round| measure(il, v, n, round),
                || self.progress.tick(),
            )?;
        }
        self.report.add_rows(&il, extra);
        Ok(())
    }

    /// Shows `msg` on the progress line, for a step measured outside [`Bench::measure`].
    pub fn message(&self, msg: impl Into<String>) {
        self.progress.message(msg);
    }

    /// One step measured outside [`Bench::measure`] done.
    pub fn tick(&self) {
        self.progress.tick();
    }

    /// Ends the run: clears the progress bar, prints `tables` and the checks, writes the
    /// JSON and the plot of `plot` where the settings ask ([`emit`]); returns the report.
    pub fn finish(
        self,
        settings: &Settings,
        tables: &[(String, Table)],
        plot: Option<(&str, &Map<String, Value>)>,
    ) -> LabResult<Report> {
        self.progress.finish();
        emit(self.report, settings, tables, plot)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::harness::{parse_threads, CommonArgs};

    #[test]
    fn rounds_interleave_at_every_thread_count_and_become_rows() {
        let settings = CommonArgs {
            threads: Some(parse_threads("1,2").unwrap()),
            duration: Some(Duration::from_millis(1)),
            runs: Some(3),
            no_progress: true,
            ..CommonArgs::default()
        }
        .settings();
        let mut bench = Bench::new("t", "-", &settings, json!({ "k": 1 }), 2);
        let mut seen = Vec::new();
        let mut extra = Map::new();
        extra.insert("part".into(), json!("x"));
        bench
            .measure("x", &["a", "b"], &extra, |il, &v, n, round| {
                seen.push(format!("{v}{n}{round}"));
                il.add(v, n, "ops_per_sec", (n * 10 + round) as f64);
                Ok(())
            })
            .unwrap();
        assert_eq!(
            seen,
            ["a10", "b10", "a11", "b11", "a12", "b12", "a20", "b20", "a21", "b21", "a22", "b22"]
        );
        let r = &bench.report;
        assert_eq!(r.params["k"], 1);
        assert_eq!(r.params["runs"], 3);
        assert_eq!(r.rows.len(), 4);
        let row = r.row("b", 2, "ops_per_sec", &extra).unwrap();
        assert_eq!(
            (row.median, row.min, row.max, row.runs),
            (21.0, 20.0, 22.0, 3)
        );
        let report = bench.finish(&settings, &[], None).unwrap();
        assert!(report.all_checks_ok());
    }
}
