//! The `all` command's summary report (markdown): every scenario's tables and checks, the
//! machine, and the seed's published figures beside ours.

use std::fmt::Write;

use crate::harness::{Report, Table};

/// The summary of a set of reports as markdown.
pub fn markdown(reports: &[(&str, Report)]) -> String {
    let mut out = String::from("# foliocache lab report\n\n");
    if let Some((_, r)) = reports.first() {
        let _ = writeln!(
            out,
            "Machine: {} CPUs, {}, kernel {}. Revision {}. Started {}.\n",
            r.machine.cpus, r.machine.cpu_model, r.machine.kernel, r.git_rev, r.started_at
        );
    }
    for (name, r) in reports {
        let _ = writeln!(out, "## {name} (seed {})\n", r.seed);
        if let Some(p) = crate::scenarios::REGISTRY.iter().find(|e| e.name == *name) {
            let _ = writeln!(out, "{}\n", p.about);
        }
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
            "Our comparisons (medians, ratio above 1 = candidate better):\n"
        );
        let _ = writeln!(out, "```\n{t}```\n");
        if let Some(p) = crate::published::for_scenario(name) {
            let _ = writeln!(out, "Published ({}): {}\n", p.seed, p.text);
        }
        for c in &r.checks {
            let _ = writeln!(
                out,
                "- check `{}` = {} ({})",
                c.name,
                c.value,
                if c.ok { "ok" } else { "FAILED" }
            );
        }
        let _ = writeln!(out, "\nRows: {}; plot `{name}.svg`.\n", r.rows.len());
    }
    out
}
