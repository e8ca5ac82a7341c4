//! The options every scenario takes, and their parsing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use super::run::MAX_THREADS;

/// The longest one measurement may run: `--duration` rejects more (a typo such as `1e20` is
/// caught before any work starts, instead of overflowing a `Duration`).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);

/// The most repetitions `--runs` accepts.
pub const MAX_RUNS: usize = 1000;

/// Options shared by every scenario (flattened into each subcommand).
#[derive(Args, Clone, Debug, Default)]
pub struct CommonArgs {
    /// Thread counts to measure: a list `1,2,4`, a range `1-8` (every count), or a
    /// geometric range `1:64:x2` (1, 2, 4 ... 64); at most 1024 threads. Default: 1 and the
    /// number of CPUs.
    #[arg(long, short = 't', value_parser = parse_threads)]
    pub threads: Option<ThreadList>,

    /// How long one measurement runs (`500ms`, `2s`, `1.5s`, at most 1h). Default 1s, or 200ms
    /// with --quick.
    #[arg(long, short = 'd', value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Repetitions of every measurement (1 to 1000); the table shows their median. Default 5.
    #[arg(long, short = 'r', value_parser = parse_runs)]
    pub runs: Option<usize>,

    /// Short runs with small sizes: a smoke test or a first look, not a result to quote.
    #[arg(long, short = 'q')]
    pub quick: bool,

    /// Write the results as JSON (schema `foliocache-lab/1`) to this file; a plot is written
    /// beside it with the extension `.svg`.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Do not pin worker threads to CPUs (pinning is on by default; worker i runs on the i-th
    /// CPU of the process's affinity mask, modulo its size).
    #[arg(long)]
    pub no_pin: bool,

    /// Do not write the plot beside the JSON.
    #[arg(long)]
    pub no_plot: bool,

    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// A parsed `--threads` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadList(pub Vec<usize>);

/// Resolved settings: [`CommonArgs`] with every default filled in.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Thread counts, ascending, no duplicates.
    pub threads: Vec<usize>,
    /// One measurement's length.
    pub duration: Duration,
    /// Repetitions per measurement.
    pub runs: usize,
    /// Quick mode.
    pub quick: bool,
    /// Where to write JSON.
    pub json: Option<PathBuf>,
    /// Pin workers to CPUs.
    pub pin: bool,
    /// Write a plot beside the JSON.
    pub plot: bool,
    /// Show a progress bar.
    pub progress: bool,
}

impl CommonArgs {
    /// Checks what can be checked before a run starts (the result file is writable), so a
    /// bad option fails in a second rather than after the whole measurement.
    pub fn check(&self) -> Result<(), String> {
        match &self.json {
            Some(p) => check_writable(p),
            None => Ok(()),
        }
    }

    /// Fills in the defaults. `max_threads_default` caps the default thread list (scenarios
    /// whose threads each need a lot of memory may ask for fewer).
    pub fn settings(&self) -> Settings {
        let cpus = foliocache::mm::sync::num_cpus().max(1);
        let mut threads = match &self.threads {
            Some(t) => t.0.clone(),
            None if cpus > 1 => vec![1, cpus],
            None => vec![1],
        };
        threads.sort_unstable();
        threads.dedup();
        Settings {
            threads,
            duration: self.duration.unwrap_or(if self.quick {
                Duration::from_millis(200)
            } else {
                Duration::from_secs(1)
            }),
            runs: self.runs.unwrap_or(5).clamp(1, MAX_RUNS),
            quick: self.quick,
            json: self.json.clone(),
            pin: !self.no_pin,
            plot: !self.no_plot,
            progress: !self.no_progress,
        }
    }
}

impl Settings {
    /// The `params` object of the JSON report, with scenario-specific fields merged in.
    pub fn params(&self, extra: serde_json::Value) -> serde_json::Value {
        let mut p = serde_json::json!({
            "threads": self.threads,
            "duration_ms": self.duration.as_millis() as u64,
            "runs": self.runs,
            "quick": self.quick,
            "pinned": self.pin,
        });
        if let (Some(map), serde_json::Value::Object(more)) = (p.as_object_mut(), extra) {
            map.extend(more);
        }
        p
    }
}

/// Parses a thread list: `4`, `1,2,4`, `1-8`, `1:64:x2` (geometric) or `2:16:+2` (arithmetic).
pub fn parse_threads(s: &str) -> Result<ThreadList, String> {
    let bad = |why: &str| {
        format!("invalid thread list `{s}`: {why} (examples: 4, 1,2,4, 1-8, 1:64:x2, 2:16:+2)")
    };
    let num = |t: &str| -> Result<usize, String> {
        let n: usize = t
            .trim()
            .parse()
            .map_err(|_| bad(&format!("`{t}` is not a number")))?;
        if n == 0 {
            return Err(bad("thread counts start at 1"));
        }
        if n > MAX_THREADS {
            return Err(bad(&format!(
                "{n} is above the lab's cap of {MAX_THREADS} threads per measurement"
            )));
        }
        Ok(n)
    };
    let mut out = Vec::new();
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 3 {
            return Err(bad("a range with steps is start:end:xF or start:end:+N"));
        }
        let (start, end) = (num(parts[0])?, num(parts[1])?);
        if start > end {
            return Err(bad("start is above end"));
        }
        let step = parts[2].trim();
        if let Some(f) = step.strip_prefix('x') {
            let f = num(f)?;
            if f < 2 {
                return Err(bad("a geometric factor must be at least 2"));
            }
            let mut n = start;
            while n <= end {
                out.push(n);
                n *= f;
            }
            if out.last() != Some(&end) {
                out.push(end);
            }
        } else if let Some(d) = step.strip_prefix('+') {
            let d = num(d)?;
            out.extend((start..=end).step_by(d));
        } else {
            return Err(bad("the step must start with x (factor) or + (increment)"));
        }
    } else {
        for part in s.split(',') {
            if let Some((a, b)) = part.split_once('-') {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(bad("range start is above its end"));
                }
                out.extend(a..=b);
            } else {
                out.push(num(part)?);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(ThreadList(out))
}

/// Parses a duration: `250ms`, `2s`, `1.5s`, `1m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    // The unit is the trailing run of letters, so an exponent (`1e3ms`, `1e20`) stays in the
    // number.
    let split = t.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len();
    let (num, unit) = match &t[split..] {
        "" => (t, "s"),
        unit => (&t[..split], unit),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("invalid duration `{s}` (examples: 250ms, 2s, 1.5s, 1m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" | "min" => v * 60.0,
        _ => return Err(format!("invalid duration unit in `{s}`: use ms, s or m")),
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("duration `{s}` must be positive"));
    }
    if secs > MAX_DURATION.as_secs_f64() {
        return Err(format!(
            "duration `{s}` is above the cap of {}s per measurement",
            MAX_DURATION.as_secs()
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `--runs`: a whole number from 1 to [`MAX_RUNS`].
pub fn parse_runs(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid run count `{s}`: a whole number from 1 to {MAX_RUNS}"))?;
    if !(1..=MAX_RUNS).contains(&n) {
        return Err(format!(
            "invalid run count `{s}`: every measurement runs at least once and at most \
             {MAX_RUNS} times"
        ));
    }
    Ok(n)
}

/// Checks, before anything runs, that a result file can be written at `path` (and the plot
/// beside it): its folder exists and is writable, and the path is not a folder. A run that
/// only found out at its end would lose every measurement.
pub fn check_writable(path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.is_dir() {
        return Err(format!(
            "cannot write results to {shown}: it is a directory"
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "cannot write results to {shown}: the directory {} does not exist",
            dir.display()
        ));
    }
    // Probe with a real write: permission bits alone miss read-only mounts and ACLs.
    let probe = tempfile::Builder::new()
        .prefix(".foliocache-lab-probe")
        .tempfile_in(dir);
    if let Err(e) = probe {
        return Err(format!(
            "cannot write results to {shown}: the directory {} is not writable ({e})",
            dir.display()
        ));
    }
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot write results to {shown}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_lists() {
        assert_eq!(parse_threads("4").unwrap().0, vec![4]);
        assert_eq!(parse_threads("4,1,2,2").unwrap().0, vec![1, 2, 4]);
        assert_eq!(parse_threads("1-4").unwrap().0, vec![1, 2, 3, 4]);
        assert_eq!(
            parse_threads("1:64:x2").unwrap().0,
            vec![1, 2, 4, 8, 16, 32, 64]
        );
        assert_eq!(parse_threads("1:48:x4").unwrap().0, vec![1, 4, 16, 48]);
        assert_eq!(parse_threads("2:8:+3").unwrap().0, vec![2, 5, 8]);
        assert_eq!(parse_threads("1024").unwrap().0, vec![1024]);
        for bad in ["0", "a", "4-1", "1:2", "1:8:x1", "1:8:*2", "9999", "1025"] {
            assert!(parse_threads(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("60m").unwrap(), MAX_DURATION);
        assert_eq!(parse_duration("1e3ms").unwrap(), Duration::from_secs(1));
        // A bare 1e20 (seconds) used to reach `Duration::from_secs_f64` and panic.
        for bad in [
            "",
            "x",
            "-1s",
            "0s",
            "3h",
            "1e20",
            "100000000000000000000",
            "61m",
            "inf",
            "NaN",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn run_counts() {
        assert_eq!(parse_runs("1"), Ok(1));
        assert_eq!(parse_runs("1000"), Ok(1000));
        for bad in ["0", "-1", "x", "1001", ""] {
            assert!(parse_runs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn result_paths_are_checked_up_front() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_writable(&dir.path().join("r.json")).is_ok());
        assert!(check_writable(dir.path()).is_err());
        assert!(check_writable(&dir.path().join("missing/r.json")).is_err());
    }
}
