//! The lab's scenarios, one per seed experiment.
//!
//! Each scenario module has the same shape:
//!
//! - `SEED`: the seed file it reproduces;
//! - `Args`: its clap options, with [`CommonArgs`](crate::harness::CommonArgs) flattened in;
//! - `run(&Args) -> LabResult<Report>`: measures (variants interleaved), prints the
//!   seed-shaped table, writes JSON and plot when asked ([`crate::harness::emit`]), and returns
//!   the report.
//!
//! [`REGISTRY`] lists them for `foliocache-lab all`.

use crate::harness::{CommonArgs, LabResult, Report};

pub mod files;
pub mod pread;
pub mod readseq;

/// A scenario as `all` runs it: name, seed, and a runner taking only the common options.
pub struct Entry {
    /// Subcommand name.
    pub name: &'static str,
    /// Seed file reproduced.
    pub seed: &'static str,
    /// One line on what it measures.
    pub about: &'static str,
    /// Runs it with every scenario-specific option at its default.
    pub run: fn(&CommonArgs) -> LabResult<Report>,
}

/// Every scenario, in the order `all` runs them.
pub const REGISTRY: &[Entry] = &[Entry {
    name: "pread",
    seed: pread::SEED,
    about: "64-byte pread at offset 0 of one tmpfs file, N pinned threads: foliocache with each refcount strategy against the kernel's pread",
    run: pread::run_common,
}, Entry {
    name: "readseq",
    seed: readseq::SEED,
    about: "db_bench readseq: threads stream 8 KiB values through a cold cache; one-by-one vs batched readahead insertion, per-thread files and one shared file",
    run: readseq::run_common,
}];
