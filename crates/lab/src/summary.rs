//! The `all` command's summary report: the machine, then for every scenario the seed's
//! published figures (quoted, with the seed file named) beside the tables we measured, the
//! comparisons, the checks, the system's counters and the plot.
//!
//! Two forms of the same content are written beside the JSON: `report.md` ([`markdown`]),
//! which links each scenario's SVG file, and `report.html` ([`html`]), one self-contained
//! page (CSS and every figure inline, no external file, no script) that reads offline and
//! survives being mailed or attached to an issue. The HTML's tables are the scenarios' own
//! tables, cell for cell, except that numbers in scientific notation read with an SI prefix
//! (`1.697e8` becomes `170 M`); its figures are [`crate::harness::figure`] of the metric each
//! scenario plots.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use crate::harness::{esc, figure, LabError, LabResult, Report, Table, Unit};

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
    out += &header(reports, info);
    let _ = writeln!(
        out,
        "The same report with its figures inline, for reading offline: `report.html`.\n"
    );
    let t = contents_table(reports, info);
    let _ = writeln!(out, "## Contents\n\n```\n{t}```\n");
    for (name, r) in reports {
        scenario_section(&mut out, name, r, info);
    }
    out
}

/// The machine, the run and how to read the numbers (markdown paragraphs).
fn header(reports: &[(&str, Report)], info: &RunInfo) -> String {
    let mut out = String::new();
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
    out
}

/// The contents: one line per scenario run (and per scenario that stopped with an error).
fn contents_table(reports: &[(&str, Report)], info: &RunInfo) -> Table {
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
    t
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
    if let Some(t) = comparisons_table(r) {
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

/// The report's comparisons as a table, if it has any.
fn comparisons_table(r: &Report) -> Option<Table> {
    if r.comparisons.is_empty() {
        return None;
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
    Some(t)
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

/// The style sheet of `report.html` (inline; no `<` or `&`, so the page parses as XML too).
const CSS: &str = "
body { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; max-width: 960px;
  margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ccc; padding-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ddd; margin-top: 2.5em; }
h3 { font-size: 1em; margin-bottom: 0.3em; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 0.88em; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; }
.published { background: #f5f8ff; border-left: 4px solid #7a9cd6; padding: 0.4em 0.8em; }
.failed { color: #b00; font-weight: bold; }
figure { margin: 1em 0; }
figure svg { max-width: 100%; height: auto; }
";

/// The summary of a set of reports as one self-contained HTML page: the content of
/// [`markdown`], with real tables and each scenario's figure inline.
pub fn html(reports: &[(&str, Report)], info: &RunInfo) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n\
         <title>foliocache lab report</title>\n",
    );
    let _ = writeln!(out, "<style>{CSS}</style>\n</head>\n<body>");
    out.push_str("<h1>foliocache lab report</h1>\n");
    for para in header(reports, info)
        .split("\n\n")
        .filter(|p| !p.trim().is_empty())
    {
        let lines: Vec<String> = para.lines().map(|l| inline_md(l.trim_end())).collect();
        let _ = writeln!(out, "<p>{}</p>", lines.join("<br/>\n"));
    }
    out.push_str("<h2 id=\"contents\">Contents</h2>\n");
    let mut t = table_html(&contents_table(reports, info), "contents");
    for (name, _) in reports {
        // Link each scenario's name to its section.
        t = t.replacen(
            &format!("<td>{}</td>", esc(name)),
            &format!("<td><a href=\"#{0}\">{0}</a></td>", esc(name)),
            1,
        );
    }
    out += &t;
    for (name, r) in reports {
        scenario_html(&mut out, name, r);
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// Writes [`html`] to `report.html` in the run's output directory; returns its path.
pub fn write_html(reports: &[(&str, Report)], info: &RunInfo) -> LabResult<std::path::PathBuf> {
    let path = info.out.join("report.html");
    std::fs::write(&path, html(reports, info))
        .map_err(|e| LabError(format!("writing {}: {e}", path.display())))?;
    Ok(path)
}

fn scenario_html(out: &mut String, name: &str, r: &Report) {
    let _ = writeln!(
        out,
        "<section class=\"scenario\" id=\"{0}\">\n<h2>{0}</h2>",
        esc(name)
    );
    if let Some(p) = crate::scenarios::REGISTRY.iter().find(|e| e.name == name) {
        let _ = writeln!(out, "<p>{}</p>", inline_md(p.about));
    }
    match crate::published::for_scenario(name) {
        Some(p) => {
            let _ = writeln!(
                out,
                "<p class=\"published\"><strong>Published</strong> (seed <code>{}</code>): {}</p>",
                esc(p.seed),
                inline_md(p.text)
            );
        }
        None => {
            let _ = writeln!(out, "<p>Seed: <code>{}</code>.</p>", esc(&r.seed));
        }
    }
    if let Some((metric, extra)) = &r.plot {
        match figure(r, metric, extra) {
            Ok(svg) => {
                let _ = writeln!(out, "<figure class=\"plot\">\n{svg}</figure>");
            }
            Err(e) => {
                let _ = writeln!(out, "<p>No figure: {}.</p>", esc(&e.to_string()));
            }
        }
    }
    out.push_str("<h3>Measured here</h3>\n");
    for (title, table) in &r.tables {
        if !title.is_empty() {
            let _ = writeln!(out, "<p>{}</p>", inline_md(title));
        }
        *out += &table_html(table, "measured");
    }
    if let Some(t) = comparisons_table(r) {
        out.push_str("<h3>Comparisons (medians; ratio above 1 = candidate better)</h3>\n");
        *out += &table_html(&t, "comparisons");
    }
    if !r.checks.is_empty() {
        out.push_str("<h3>Checks</h3>\n<ul class=\"checks\">\n");
        for c in &r.checks {
            let verdict = if c.ok {
                "ok".to_string()
            } else {
                "<span class=\"failed\">FAILED</span>".to_string()
            };
            let _ = writeln!(
                out,
                "<li><code>{}</code> = {} ({verdict})</li>",
                esc(&c.name),
                esc(&c.value.to_string())
            );
        }
        out.push_str("</ul>\n");
    }
    if let Some(stats) = &r.stats {
        let mut lines = String::new();
        vmstat_lines(&mut lines, "", stats);
        let _ = writeln!(
            out,
            "<h3>Counters of the system under test</h3>\n<pre>{}</pre>",
            esc(&lines)
        );
    }
    out.push_str("</section>\n");
}

/// A [`Table`] as an HTML table, from its rendered text (the columns are `|`-separated, the
/// second line is the rule); cells that read as numbers are right-aligned.
fn table_html(t: &Table, class: &str) -> String {
    let text = t.render();
    let mut lines = text.lines();
    let split = |l: &str| -> Vec<String> { l.split(" | ").map(|c| c.trim().to_string()).collect() };
    let header = lines.next().map(split).unwrap_or_default();
    let mut out = format!("<table class=\"{class}\">\n<thead><tr>");
    for h in &header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for l in lines.skip(1) {
        let mut cells: Vec<String> = split(l).into_iter().map(human_cell).collect();
        cells.resize(header.len().max(cells.len()), String::new());
        out.push_str("<tr>");
        for c in &cells {
            let numeric = c
                .trim_start_matches(['+', '-'])
                .starts_with(|ch: char| ch.is_ascii_digit());
            if numeric {
                let _ = write!(out, "<td class=\"num\">{}</td>", esc(c));
            } else {
                let _ = write!(out, "<td>{}</td>", esc(c));
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// A cell in scientific notation (`1.697e8`, as the text tables print large numbers) with
/// an SI prefix instead (`170 M`); any other cell as it is.
fn human_cell(c: String) -> String {
    match c.parse::<f64>() {
        Ok(v) if c.contains(['e', 'E']) => Unit::Plain.format(v),
        _ => c,
    }
}

/// The inline markdown the report's prose uses (`code`, **bold**) as escaped HTML.
fn inline_md(s: &str) -> String {
    let mut out = String::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", esc(part));
            continue;
        }
        for (j, p) in part.split("**").enumerate() {
            if j % 2 == 1 {
                let _ = write!(out, "<strong>{}</strong>", esc(p));
            } else {
                out += &esc(p);
            }
        }
    }
    out
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
