//! The options every scenario takes, and their parsing.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Options shared by every scenario (flattened into each subcommand).
#[derive(Args, Clone, Debug, Default)]
pub struct CommonArgs {
    /// Thread counts to measure: a list `1,2,4`, a range `1-8` (every count), or a
    /// geometric range `1:64:x2` (1, 2, 4 ... 64). Default: 1 and the number of CPUs.
    #[arg(long, short = 't', value_parser = parse_threads)]
    pub threads: Option<ThreadList>,

    /// How long one measurement runs (`500ms`, `2s`, `1.5s`). Default 1s, or 200ms with --quick.
    #[arg(long, short = 'd', value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Repetitions of every measurement; the table shows their median. Default 5.
    #[arg(long, short = 'r')]
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
    /// Fills in the defaults. `max_threads_default` caps the default thread list (scenarios
    /// whose threads each need a lot of memory may ask for fewer).
    pub fn settings(&self) -> Settings {
        let cpus = foliocache::sync::num_cpus().max(1);
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
            runs: self.runs.unwrap_or(5).max(1),
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
        if n > 4096 {
            return Err(bad("more than 4096 threads"));
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
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "s"),
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
    Ok(Duration::from_secs_f64(secs))
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
        for bad in ["0", "a", "4-1", "1:2", "1:8:x1", "1:8:*2", "9999"] {
            assert!(parse_threads(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        for bad in ["", "x", "-1s", "0s", "3h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
