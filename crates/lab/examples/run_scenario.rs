//! Run one lab scenario from Rust and use its results.
//!
//! ```sh
//! cargo run --release -p foliocache-lab --example run_scenario            # refcount
//! cargo run --release -p foliocache-lab --example run_scenario -- peers   # any scenario by name
//! ```
//!
//! The same code the `foliocache-lab` binary runs: options in, a [`Report`] out (the rows,
//! comparisons and checks of the `foliocache-lab/1` JSON), the seed-shaped tables printed on
//! the way. A script that tracks a ratio across commits, or a test that fails when a check
//! does, starts here.

use std::time::Duration;

use foliocache_lab::harness::{parse_threads, CommonArgs, Report};
use foliocache_lab::scenarios::{refcount, REGISTRY};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Short runs: 2 thread counts, 3 interleaved repetitions of 100 ms, no progress bar.
    let common = CommonArgs {
        threads: Some(parse_threads("1,2")?),
        duration: Some(Duration::from_millis(100)),
        runs: Some(3),
        quick: true,
        no_progress: true,
        ..CommonArgs::default()
    };

    let name = std::env::args().nth(1).unwrap_or_else(|| "refcount".into());
    let report: Report = if name == "refcount" {
        // A scenario's own options, typed: each scenario module has `Args` and `run`.
        refcount::run(&refcount::Args {
            common: common.clone(),
        })?
    } else {
        // Or any scenario by name, with its defaults, as `foliocache-lab all` runs them.
        let entry = REGISTRY.iter().find(|e| e.name == name).ok_or_else(|| {
            let names: Vec<_> = REGISTRY.iter().map(|e| e.name).collect();
            format!("no scenario `{name}` (have: {})", names.join(", "))
        })?;
        (entry.run)(&common)?
    };

    println!(
        "\n{} on {} CPUs ({}):",
        report.scenario, report.machine.cpus, report.machine.cpu_model
    );
    for c in &report.comparisons {
        println!(
            "  {:>18} vs {:<14} at {} thread(s): {:.2}x ({})",
            c.candidate, c.baseline, c.threads, c.ratio, c.metric
        );
    }
    let path = std::env::temp_dir().join(format!("{}.json", report.scenario));
    report.write_json(&path)?;
    println!("JSON: {}", path.display());
    if !report.all_checks_ok() {
        return Err(format!("a check failed: {:?}", report.checks).into());
    }
    Ok(())
}
