//! The measurement harness every scenario shares.
//!
//! A scenario is a function from its options to a [`Report`]. The harness gives it:
//!
//! - [`Bench`]: the measurement skeleton every scenario fills in: the report, the progress
//!   line, interleaved rounds of variants × thread counts × runs, a row of medians per
//!   (variant, threads, metric), and at the end the tables, JSON and plot ([`emit`]);
//! - [`CommonArgs`]: the options every scenario takes (`--threads`, `--duration`, `--runs`,
//!   `--quick`, `--json`, `--no-pin`, `--no-plot`) and their parsing;
//! - [`IoArgs`] and [`IoSetup`]: the options of the scenarios that read and write files
//!   (`--dir`, `--io`, `--direct`) and what their caches got there (file system, engine,
//!   direct or buffered); [`drop_kernel_cache`], [`kernel_residency`] and [`cpu_time`] for
//!   cold measurements;
//! - [`FioArgs`] and [`FioJob`]: fio beside a cold measurement, the device's limit for the
//!   same file, pattern and queue depth;
//! - [`run_threads`]: N threads pinned to CPUs, all spawned and parked before the clock
//!   starts, released together, counted up to the stop signal (the window is the clock's);
//! - [`Interleaver`]: runs every variant once per round, rounds repeated `runs` times
//!   (A B A B ...), so the drift of a noisy machine hits every variant alike, and keeps the
//!   samples;
//! - [`Report`]: the `foliocache-lab/1` JSON document of `docs/LAB-RESULTS.md`, with rows
//!   (median, min, max of the samples), comparisons and checks;
//! - [`Table`] and [`seed_table`]: the human table in the seed's shape
//!   (`#threads | vanilla | patched | boost (%)`);
//! - [`plot`] and [`figure`]: a scenario's SVG figure, the boost of each comparison against
//!   threads with the seed's published points, then the measured values;
//! - [`Progress`]: a progress bar on stderr for runs longer than a couple of seconds;
//! - [`rates_beyond_cpus`]: the check `rate_within_cpus` that [`emit`] adds to every report,
//!   failing a throughput row faster than the CPUs available can go.

mod args;
mod bench;
mod fileio;
mod fio;
mod plot_svg;
mod progress;
mod report;
mod run;
mod stats;
mod table;

pub use args::{
    check_writable, parse_duration, parse_runs, parse_threads, CommonArgs, Settings, MAX_DURATION,
    MAX_RUNS,
};
pub use bench::Bench;
pub use fileio::{
    cpu_time, drop_kernel_cache, free_bytes, fs_name, kernel_residency, merge, mode_name,
    parse_variant, Filesystem, IoArgs, IoSetup,
};
pub use fio::{parse_fio, FioArgs, FioJob, FioOut, FIO_ENGINES};
pub use plot_svg::{esc, figure, plot, Unit};
pub use progress::Progress;
pub use report::{Check, Comparison, Machine, Report, Row, SCHEMA};
pub use run::{per_sec, run_threads, Interleaver, ThreadRun, CHECK_EVERY, MAX_THREADS};
pub use stats::{
    cpus_available, is_throughput, rates_beyond_cpus, Summary, RATE_CHECK, RATE_MIN_WINDOW,
    RATE_SLACK,
};
pub use table::{fmt_num, seed_order, seed_table, Table};

/// An error that stops a scenario; printed to the user with its context.
#[derive(Debug)]
pub struct LabError(pub String);

impl std::fmt::Display for LabError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LabError {}

impl From<std::io::Error> for LabError {
    fn from(e: std::io::Error) -> Self {
        LabError(format!("I/O error: {e}"))
    }
}

impl From<serde_json::Error> for LabError {
    fn from(e: serde_json::Error) -> Self {
        LabError(format!("JSON error: {e}"))
    }
}

/// Result of a lab step.
pub type LabResult<T> = Result<T, LabError>;

/// Shorthand for building a [`LabError`] with `format!` syntax.
#[macro_export]
macro_rules! lab_err {
    ($($arg:tt)*) => { $crate::harness::LabError(format!($($arg)*)) };
}

/// Prints `tables`, and writes the report's JSON (and, unless disabled, the plot of
/// `plot_metric` over `plot_extra` rows) where the settings ask. Returns the report, carrying
/// the tables for the `all` summary.
pub fn emit(
    mut report: Report,
    settings: &Settings,
    tables: &[(String, Table)],
    plot_metric: Option<(&str, &serde_json::Map<String, serde_json::Value>)>,
) -> LabResult<Report> {
    // The generic sanity bound every scenario's report carries (see `rates_beyond_cpus`).
    if settings.duration >= stats::RATE_MIN_WINDOW {
        let cpus = stats::cpus_available();
        let over = stats::rates_beyond_cpus(&report.rows, cpus);
        for line in &over {
            eprintln!(
                "{}: rate above what {cpus} CPU(s) can do: {line}",
                report.scenario
            );
        }
        report.check(stats::RATE_CHECK, over.len(), over.is_empty());
    } else {
        report.check(
            stats::RATE_CHECK,
            format!("not judged: windows under {:?}", stats::RATE_MIN_WINDOW),
            true,
        );
    }
    for (title, t) in tables {
        if !title.is_empty() {
            println!("{title}");
        }
        println!("{t}");
    }
    for c in &report.checks {
        println!(
            "check {:<28} {:>12}  {}",
            c.name,
            c.value.to_string(),
            if c.ok { "ok" } else { "FAILED" }
        );
    }
    if let Some(path) = &settings.json {
        report.write_json(path)?;
        println!("results: {}", path.display());
        if let (true, Some((metric, extra))) = (settings.plot, plot_metric) {
            let svg = path.with_extension("svg");
            plot(&report, metric, extra, &svg)?;
            println!("plot:    {}", svg.display());
        }
    }
    report.tables = tables.to_vec();
    report.plot = plot_metric.map(|(m, e)| (m.to_string(), e.clone()));
    Ok(report)
}
