//! The `all` command's summary report (markdown): the machine, then for every scenario the
//! seed's published figures (quoted, with the seed file named) beside the tables we measured,
//! the comparisons, the checks, the system's counters and the plot.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use crate::harness::{Report, Table};

/// How the `all` run went, beside the reports.
#[derive(Debug, Default)]
pub struct RunInfo {
    /// The command line.
    pub command: String,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// Each scenario's wall time, by name.
    pub timings: Vec<(String, Duration)>,
    /// Scenarios that stopped with an error: name and message.
    pub errors: Vec<(String, String)>,
    /// The report directory (to link plots that exist).
    pub out: std::path::PathBuf,
}

/// `MemTotal` from `/proc/meminfo`, in GiB.
fn memory_gib() -> Option<f64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / (1u64 << 20) as f64)
    })
}

/// The summary of a set of reports as markdown.
pub fn markdown(reports: &[(&str, Report)], info: &RunInfo) -> String {
    let mut out = String::from("# foliocache lab report\n\n");
    let machine = crate::harness::Machine::current();
    let _ = writeln!(
        out,
        "**Machine:** {} CPUs ({}), {} memory, Linux {}.  ",
        machine.cpus,
        machine.cpu_model,
        memory_gib().map_or("unknown".into(), |g| format!("{g:.1} GiB")),
        machine.kernel
    );
    if let Some((_, r)) = reports.first() {
        let _ = writeln!(
            out,
            "**Revision:** {}. **Started:** {}. **Parameters:** {}.  ",
            r.git_rev,
            r.started_at,
            params_line(&r.params)
        );
    }
    let _ = writeln!(
        out,
        "**Command:** `{}`. **Total time:** {:.1} s.\n",
        info.command,
        info.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "Every number below is a median over the runs, measured on this machine with the \
         variants interleaved in one process. The seeds' published figures were measured on \
         other machines (named with each) and are quoted for their shape, not to be matched \
         digit for digit. On a machine with few CPUs the thread counts stop where the seeds' \
         effects start; run `all --full --threads 1:64:x2` on a big machine for the curves.\n"
    );

    let mut t = Table::new(["scenario", "seed", "time (s)", "checks", "result"]);
    for (name, r) in reports {
        let failed = r.checks.iter().filter(|c| !c.ok).count();
        t.row([
            name.to_string(),
            r.seed.clone(),
            timing(info, name),
            format!("{}/{} ok", r.checks.len() - failed, r.checks.len()),
            format!("`{name}.json`"),
        ]);
    }
    for (name, e) in &info.errors {
        t.row([
            name.clone(),
            "-".into(),
            timing(info, name),
            "-".into(),
            format!("ERROR: {e}"),
        ]);
    }
    let _ = writeln!(out, "## Contents\n\n```\n{t}```\n");

    for (name, r) in reports {
        scenario_section(&mut out, name, r, info);
    }
    out
}

fn timing(info: &RunInfo, name: &str) -> String {
    info.timings
        .iter()
        .find(|(n, _)| n == name)
        .map_or("-".into(), |(_, d)| format!("{:.1}", d.as_secs_f64()))
}

fn params_line(p: &serde_json::Value) -> String {
    let get = |k: &str| p.get(k).map_or("-".to_string(), |v| v.to_string());
    format!(
        "threads {}, {} ms per measurement, {} runs, quick {}, pinned {}",
        get("threads"),
        get("duration_ms"),
        get("runs"),
        get("quick"),
        get("pinned")
    )
}

fn scenario_section(out: &mut String, name: &str, r: &Report, info: &RunInfo) {
    let _ = writeln!(out, "## {name}\n");
    if let Some(p) = crate::scenarios::REGISTRY.iter().find(|e| e.name == name) {
        let _ = writeln!(out, "{}\n", p.about);
    }
    match crate::published::for_scenario(name) {
        Some(p) => {
            let _ = writeln!(out, "**Published** (seed `{}`): {}\n", p.seed, p.text);
        }
        None => {
            let _ = writeln!(out, "Seed: `{}`.\n", r.seed);
        }
    }
    let _ = writeln!(out, "**Measured here:**\n");
    for (title, table) in &r.tables {
        if !title.is_empty() {
            let _ = writeln!(out, "{title}\n");
        }
        let _ = writeln!(out, "```\n{table}```\n");
    }
    if !r.comparisons.is_empty() {
        let mut t = Table::new([
            "metric",
            "candidate",
            "baseline",
            "threads",
            "ratio",
            "boost (%)",
        ]);
        for c in &r.comparisons {
            let mut metric = c.metric.clone();
            for (k, v) in &c.extra {
                let _ = write!(
                    metric,
                    " {k}={}",
                    v.as_str().map_or(v.to_string(), str::to_string)
                );
            }
            t.row([
                metric,
                c.candidate.clone(),
                c.baseline.clone(),
                c.threads.to_string(),
                format!("{:.3}", c.ratio),
                format!("{:+.1}", c.boost_pct),
            ]);
        }
        let _ = writeln!(
            out,
            "Comparisons (medians; ratio above 1 = candidate better):\n\n```\n{t}```\n"
        );
    }
    for c in &r.checks {
        let _ = writeln!(
            out,
            "- check `{}` = {} ({})",
            c.name,
            c.value,
            if c.ok { "ok" } else { "**FAILED**" }
        );
    }
    if let Some(stats) = &r.stats {
        let _ = writeln!(out, "\nCounters of the system under test (`stats`):\n\n```");
        vmstat_lines(out, "", stats);
        let _ = writeln!(out, "```");
    }
    let svg = format!("{name}.svg");
    if Path::new(&info.out).join(&svg).exists() {
        let _ = writeln!(out, "\n![{name}]({svg})\n");
    } else {
        out.push('\n');
    }
}

/// `/proc/vmstat`-style lines of a stats object; nested objects prefix their keys
/// (`batched/hits 3`).
fn vmstat_lines(out: &mut String, prefix: &str, v: &serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}/{k}")
                };
                vmstat_lines(out, &key, v);
            }
        }
        other => {
            let _ = writeln!(out, "{prefix} {other}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_carry_tables_checks_and_published_figures() {
        let mut r = Report::new(
            "refcount",
            "000_b7e69cdd1cb63f8c.txt",
            serde_json::json!({}),
        );
        let mut t = Table::new(["#threads", "x"]);
        t.row(["1", "2"]);
        r.tables.push(("A title".into(), t));
        r.check("final_count_balanced", 0, true);
        r.stats = Some(serde_json::json!({"hits": 3, "batched": {"misses": 4}}));
        let info = RunInfo {
            command: "foliocache-lab all".into(),
            errors: vec![("peers".into(), "boom".into())],
            ..RunInfo::default()
        };
        let md = markdown(&[("refcount", r)], &info);
        for want in [
            "**Machine:**",
            "A title",
            "#threads | x",
            "Pedro Falcato",
            "`final_count_balanced` = 0 (ok)",
            "hits 3",
            "batched/misses 4",
            "ERROR: boom",
        ] {
            assert!(md.contains(want), "missing {want:?} in\n{md}");
        }
    }
}
