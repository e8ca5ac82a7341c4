//! Command-line front end: one subcommand per scenario (from the scenario registry,
//! [`crate::scenarios::REGISTRY`]), plus `all` and `validate`.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, Subcommand};

use crate::harness::{CommonArgs, LabResult, Report};
use crate::scenarios::{Entry, ScenarioCommand, REGISTRY};
use crate::summary::RunInfo;

/// The foliocache lab: reproduces the seed patch threads' experiments, the kernel's vanilla
/// behaviour against the patch, interleaved in one process.
#[derive(Parser, Debug)]
#[command(name = "foliocache-lab", version, about, long_about = None)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run every scenario (quick mode unless --full) and write a report directory.
    All(AllArgs),
    /// The scenarios, one subcommand each, from the registry
    /// ([`crate::scenarios::REGISTRY`]).
    #[command(flatten)]
    Scenario(ScenarioCommand),
    /// Check a JSON result file against the `foliocache-lab/1` schema rules.
    Validate {
        /// Result files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also fail if any recorded check is not ok.
        #[arg(long)]
        strict: bool,
    },
}

/// Options of `all`.
#[derive(clap::Args, Debug, Clone)]
pub struct AllArgs {
    /// Directory for the JSON results, plots and the summary report.
    #[arg(long, default_value = "lab-results")]
    pub out: PathBuf,
    /// Full-length runs instead of quick mode.
    #[arg(long)]
    pub full: bool,
    /// Only these scenarios (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Options passed to every scenario (--json and --quick are set by `all`).
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("foliocache-lab: error: {e}");
            1
        }
    }
}

fn run(cli: Cli) -> LabResult<i32> {
    match cli.command {
        Command::All(a) => run_all(&a),
        Command::Scenario(s) => {
            s.common.check().map_err(crate::harness::LabError)?;
            Ok(exit_code(s.run()?))
        }
        Command::Validate { files, strict } => {
            let mut bad = 0;
            // Every file is checked and reported, a bad one does not hide the ones after it.
            for f in &files {
                let (report, problems) = match Report::validate_file(f) {
                    Ok(r) => r,
                    Err(e) => {
                        bad += 1;
                        println!("{e}");
                        continue;
                    }
                };
                let failed: Vec<_> = report.checks.iter().filter(|c| !c.ok).collect();
                if problems.is_empty() && (!strict || failed.is_empty()) {
                    println!(
                        "{}: ok ({} rows, {} comparisons, {} checks)",
                        f.display(),
                        report.rows.len(),
                        report.comparisons.len(),
                        report.checks.len()
                    );
                } else {
                    bad += 1;
                    for p in problems {
                        println!("{}: {p}", f.display());
                    }
                    if strict {
                        for c in failed {
                            println!(
                                "{}: check {} failed (value {})",
                                f.display(),
                                c.name,
                                c.value
                            );
                        }
                    }
                }
            }
            Ok(i32::from(bad > 0))
        }
    }
}

/// A scenario's exit code: 0 if every check held, 1 otherwise.
fn exit_code(report: Report) -> i32 {
    i32::from(!report.all_checks_ok())
}

fn run_all(a: &AllArgs) -> LabResult<i32> {
    for name in &a.only {
        if Entry::find(name).is_none() {
            let names: Vec<_> = REGISTRY.iter().map(|e| e.name).collect();
            return Err(crate::lab_err!(
                "unknown scenario `{name}` (have: {})",
                names.join(", ")
            ));
        }
    }
    std::fs::create_dir_all(&a.out)
        .map_err(|e| crate::lab_err!("creating {}: {e}", a.out.display()))?;
    crate::harness::check_writable(&a.out.join("report.md")).map_err(crate::harness::LabError)?;
    let selected: Vec<_> = REGISTRY
        .iter()
        .filter(|e| a.only.is_empty() || a.only.iter().any(|n| n == e.name))
        .collect();
    let start = Instant::now();
    let mut info = RunInfo {
        command: std::iter::once("foliocache-lab".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        out: a.out.clone(),
        ..RunInfo::default()
    };
    let mut reports = Vec::new();
    for (i, e) in selected.iter().enumerate() {
        println!(
            "\n=== [{}/{}] {} (seed {}), {:.0} s elapsed\n    {}\n",
            i + 1,
            selected.len(),
            e.name,
            e.seed,
            start.elapsed().as_secs_f64(),
            e.about
        );
        let mut common = a.common.clone();
        common.quick = !a.full;
        common.json = Some(a.out.join(format!("{}.json", e.name)));
        let t = Instant::now();
        match (e.run)(&common) {
            Ok(r) => reports.push((e.name, r)),
            Err(err) => {
                eprintln!("{}: error: {err}", e.name);
                info.errors.push((e.name.to_string(), err.to_string()));
            }
        }
        info.timings.push((e.name.to_string(), t.elapsed()));
        println!(
            "=== [{}/{}] {} done in {:.1} s",
            i + 1,
            selected.len(),
            e.name,
            t.elapsed().as_secs_f64()
        );
    }
    info.elapsed = start.elapsed();
    let summary = crate::summary::markdown(&reports, &info);
    let path = a.out.join("report.md");
    std::fs::write(&path, summary)
        .map_err(|e| crate::lab_err!("writing {}: {e}", path.display()))?;
    crate::summary::write_html(&reports, &info)?;
    let failed: Vec<_> = reports
        .iter()
        .flat_map(|(n, r)| {
            r.checks
                .iter()
                .filter(|c| !c.ok)
                .map(move |c| format!("{n}.{}", c.name))
        })
        .chain(info.errors.iter().map(|(n, _)| format!("{n} (error)")))
        .collect();
    println!(
        "\n{} scenarios in {:.1} s; report: {} (JSON and plots beside it)",
        reports.len(),
        info.elapsed.as_secs_f64(),
        path.display()
    );
    if failed.is_empty() {
        Ok(0)
    } else {
        eprintln!("failed: {}", failed.join(", "));
        Ok(1)
    }
}
