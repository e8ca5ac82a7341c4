//! The `foliocache-lab/1` JSON document (see `docs/LAB-RESULTS.md`).

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Interleaver, LabError, LabResult};

/// The schema identifier every report carries.
pub const SCHEMA: &str = "foliocache-lab/1";

/// One scenario's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Scenario name (the subcommand).
    pub scenario: String,
    /// The seed file whose experiment this reproduces.
    pub seed: String,
    /// Short git revision of the build, or `unknown`.
    pub git_rev: String,
    /// UTC start time, RFC 3339.
    pub started_at: String,
    /// Where it ran.
    pub machine: Machine,
    /// The parameters of the run.
    pub params: Value,
    /// One row per (variant, threads, metric[, extra identifying fields]).
    pub rows: Vec<Row>,
    /// Candidate against baseline, ratio oriented so that above 1 is better.
    pub comparisons: Vec<Comparison>,
    /// Invariants verified while measuring.
    pub checks: Vec<Check>,
    /// Counters of the system under test (`/proc/vmstat` style), when the scenario has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Value>,
    /// The human tables the scenario printed (title, table), for the `all` report; not part
    /// of the JSON.
    #[serde(skip)]
    pub tables: Vec<(String, super::Table)>,
    /// The metric and row filter the scenario plots (set by [`super::emit`]), for the `all`
    /// report's inline figures; not part of the JSON.
    #[serde(skip)]
    pub plot: Option<(String, Map<String, Value>)>,
}

/// The machine a report was measured on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// CPUs available to the process.
    pub cpus: usize,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
}

/// One measured quantity.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Variant name (stable identifier).
    pub variant: String,
    /// Worker threads.
    pub threads: usize,
    /// Metric name with its unit (`ops_per_sec`, `p99_latency_ns` ...).
    pub metric: String,
    /// Median over the runs.
    pub median: f64,
    /// Minimum over the runs.
    pub min: f64,
    /// Maximum over the runs.
    pub max: f64,
    /// Repetitions.
    pub runs: usize,
    /// Extra identifying fields (`benchmark`, `layout`, `mode` ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Candidate against baseline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Comparison {
    /// Baseline variant.
    pub baseline: String,
    /// Candidate variant.
    pub candidate: String,
    /// Worker threads.
    pub threads: usize,
    /// Metric compared.
    pub metric: String,
    /// candidate / baseline of the medians (baseline / candidate for lower-is-better metrics).
    pub ratio: f64,
    /// `(ratio - 1) * 100`.
    pub boost_pct: f64,
    /// Extra identifying fields, as in [`Row::extra`].
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An invariant verified during the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Check {
    /// Check name (stable identifier).
    pub name: String,
    /// The observed value.
    pub value: Value,
    /// Whether the invariant held.
    pub ok: bool,
}

/// Whether a metric is better when lower (times, latencies, costs), by its name.
pub fn lower_is_better(metric: &str) -> bool {
    [
        "_ns",
        "_ms",
        "_us",
        "latency",
        "runtime",
        "per_page",
        "per_folio",
        "pct",
        "stalls",
    ]
    .iter()
    .any(|s| metric.contains(s))
}

impl Report {
    /// A new, empty report for `scenario`, reproducing `seed`, with `params`.
    pub fn new(scenario: &str, seed: &str, params: Value) -> Report {
        Report {
            schema: SCHEMA.to_string(),
            scenario: scenario.to_string(),
            seed: seed.to_string(),
            git_rev: git_rev(),
            started_at: rfc3339_now(),
            machine: Machine::current(),
            params,
            rows: Vec::new(),
            comparisons: Vec::new(),
            checks: Vec::new(),
            stats: None,
            tables: Vec::new(),
            plot: None,
        }
    }

    /// Adds a row for every key the interleaver collected, with `extra` fields on each.
    pub fn add_rows(&mut self, il: &Interleaver, extra: &Map<String, Value>) {
        for (variant, threads, metric, s) in il.summaries() {
            self.rows.push(Row {
                variant: variant.to_string(),
                threads,
                metric: metric.to_string(),
                median: s.median,
                min: s.min,
                max: s.max,
                runs: s.runs,
                extra: extra.clone(),
            });
        }
    }

    /// The row matching (variant, threads, metric) whose extra fields include `extra`.
    pub fn row(
        &self,
        variant: &str,
        threads: usize,
        metric: &str,
        extra: &Map<String, Value>,
    ) -> Option<&Row> {
        self.rows.iter().find(|r| {
            r.variant == variant
                && r.threads == threads
                && r.metric == metric
                && extra.iter().all(|(k, v)| r.extra.get(k) == Some(v))
        })
    }

    /// Adds the comparison candidate vs baseline for one thread count and metric (rows must
    /// exist; the orientation follows `lower_is_better`). Returns the ratio.
    pub fn compare(
        &mut self,
        baseline: &str,
        candidate: &str,
        threads: usize,
        metric: &str,
        extra: &Map<String, Value>,
    ) -> Option<f64> {
        let b = self.row(baseline, threads, metric, extra)?.median;
        let c = self.row(candidate, threads, metric, extra)?.median;
        let ratio = ratio_of(b, c, lower_is_better(metric));
        self.comparisons.push(Comparison {
            baseline: baseline.to_string(),
            candidate: candidate.to_string(),
            threads,
            metric: metric.to_string(),
            ratio,
            boost_pct: (ratio - 1.0) * 100.0,
            extra: extra.clone(),
        });
        Some(ratio)
    }

    /// Records a check.
    pub fn check(&mut self, name: &str, value: impl Into<Value>, ok: bool) {
        self.checks.push(Check {
            name: name.to_string(),
            value: value.into(),
            ok,
        });
    }

    /// True if every check held.
    pub fn all_checks_ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// Writes the report as pretty JSON to `path` (creating parent directories).
    pub fn write_json(&self, path: &Path) -> LabResult<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| LabError(format!("creating {}: {e}", dir.display())))?;
        }
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| LabError(format!("writing {}: {e}", path.display())))
    }

    /// Reads a report and checks it against the schema's rules: known schema id, non-empty
    /// rows, well-formed numbers, comparisons consistent with their rows. Returns the report
    /// and a list of problems (empty when valid).
    pub fn validate_file(path: &Path) -> LabResult<(Report, Vec<String>)> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LabError(format!("reading {}: {e}", path.display())))?;
        let report: Report = serde_json::from_str(&text)
            .map_err(|e| LabError(format!("{} is not a lab report: {e}", path.display())))?;
        let problems = report.problems();
        Ok((report, problems))
    }

    /// Schema rule violations in this report (empty when valid).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.schema != SCHEMA {
            p.push(format!("schema is `{}`, expected `{SCHEMA}`", self.schema));
        }
        if self.rows.is_empty() {
            p.push("no rows".into());
        }
        let ident = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        };
        for r in &self.rows {
            if !ident(&r.variant) || !ident(&r.metric) {
                p.push(format!(
                    "row names not kebab/snake case: {} {}",
                    r.variant, r.metric
                ));
            }
            if !(r.min.is_finite() && r.median.is_finite() && r.max.is_finite())
                || r.min > r.median
                || r.median > r.max
                || r.runs == 0
            {
                p.push(format!(
                    "row {} {} {}: min/median/max/runs inconsistent",
                    r.variant, r.threads, r.metric
                ));
            }
        }
        for c in &self.comparisons {
            let extra = &c.extra;
            match (
                self.row(&c.baseline, c.threads, &c.metric, extra),
                self.row(&c.candidate, c.threads, &c.metric, extra),
            ) {
                (Some(b), Some(k)) => {
                    let want = ratio_of(b.median, k.median, lower_is_better(&c.metric));
                    if (want - c.ratio).abs() > 1e-9 * want.abs().max(1.0)
                        || ((c.ratio - 1.0) * 100.0 - c.boost_pct).abs() > 1e-6
                    {
                        p.push(format!(
                            "comparison {} vs {} at {} threads: ratio does not match its rows",
                            c.candidate, c.baseline, c.threads
                        ));
                    }
                }
                _ => p.push(format!(
                    "comparison {} vs {} at {} threads ({}): a row is missing",
                    c.candidate, c.baseline, c.threads, c.metric
                )),
            }
        }
        for c in &self.checks {
            if !ident(&c.name) {
                p.push(format!("check name not snake case: {}", c.name));
            }
        }
        p
    }
}

fn ratio_of(baseline: f64, candidate: f64, lower_better: bool) -> f64 {
    let (num, den) = if lower_better {
        (baseline, candidate)
    } else {
        (candidate, baseline)
    };
    if den == 0.0 {
        if num == 0.0 {
            1.0
        } else {
            f64::MAX
        }
    } else {
        num / den
    }
}

impl Machine {
    /// Describes the machine this process runs on.
    pub fn current() -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            kernel,
        }
    }
}

/// The short git revision of the source tree this binary was built from.
pub fn git_rev() -> String {
    std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    rfc3339(secs)
}

fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm), proleptic Gregorian calendar.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_291_200), "2026-11-21T20:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn comparisons_orient_and_validate() {
        let mut r = Report::new("t", "seed.txt", serde_json::json!({}));
        let mut il = Interleaver::new();
        for v in [1.0, 2.0, 3.0] {
            il.add("base", 2, "ops_per_sec", v * 10.0);
            il.add("cand", 2, "ops_per_sec", v * 12.0);
            il.add("base", 2, "runtime_ms", v * 10.0);
            il.add("cand", 2, "runtime_ms", v * 5.0);
        }
        r.add_rows(&il, &Map::new());
        let up = r
            .compare("base", "cand", 2, "ops_per_sec", &Map::new())
            .unwrap();
        assert!((up - 1.2).abs() < 1e-12);
        let faster = r
            .compare("base", "cand", 2, "runtime_ms", &Map::new())
            .unwrap();
        assert!((faster - 2.0).abs() < 1e-12);
        assert!(r
            .compare("base", "nope", 2, "ops_per_sec", &Map::new())
            .is_none());
        r.check("bad_page_events", 0, true);
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        r.comparisons[0].ratio = 3.0;
        assert_eq!(r.problems().len(), 1);
    }
}
