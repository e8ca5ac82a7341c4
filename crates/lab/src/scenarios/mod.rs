//! The lab's scenarios, one per seed experiment.
//!
//! Each scenario module has the same shape:
//!
//! - `SEED`: the seed file it reproduces;
//! - `Args`: its clap options, with [`CommonArgs`] flattened in;
//! - `run(&Args) -> LabResult<Report>`: measures (variants interleaved), prints the
//!   seed-shaped table, writes JSON and plot when asked ([`crate::harness::emit`]), and returns
//!   the report.
//!
//! [`REGISTRY`] lists them for `foliocache-lab all`. [`refcount`] is the reference example of
//! this shape; copy it to start a new scenario.
//!
//! | scenario | seed | measures |
//! |---|---|---|
//! | [`refcount`] | 000 | get+put pairs on one shared folio count, four primitives |
//! | [`pread`] | 000 | the seed's benchmark: 64-byte reads at offset 0 of one file, foliocache (each refcount strategy) against the kernel's `pread` |
//! | [`readseq`] | 001 | db_bench `readseq`: cold sequential 8 KiB reads, one-by-one vs batched readahead insertion, two layouts |
//! | [`cow`] | 002 | fork / copy-on-write micro benchmarks and concurrent anon-cow, four sharer trackings |
//! | [`hash`] | 003 | file-table lookups under a table reference, resize under load |
//! | [`lru`] | 004 | short-lived files churned through a cache under reclaim: dead folios at LRU drain, lruvec lock acquisitions per folio, vanilla vs filtered (and add-as-active) |
//! | [`peers`] | — | foliocache against quick_cache, moka, kernel pread and mmap on Zipf block reads |
//! | [`write`](mod@write) | — | the write path: the kernel's pwrite and fdatasync against foliocache on an SST flush, B-tree page updates and a commit log |

use crate::harness::{CommonArgs, LabResult, Report};

pub mod cow;
pub mod files;
pub mod hash;
pub mod lru;
pub mod peers;
pub mod pread;
pub mod readseq;
pub mod refcount;
pub mod write;

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
pub const REGISTRY: &[Entry] = &[
    Entry {
        name: refcount::NAME,
        seed: refcount::SEED,
        about: refcount::ABOUT,
        run: refcount::run_common,
    },
    Entry {
        name: pread::NAME,
        seed: pread::SEED,
        about: pread::ABOUT,
        run: pread::run_common,
    },
    Entry {
        name: readseq::NAME,
        seed: readseq::SEED,
        about: readseq::ABOUT,
        run: readseq::run_common,
    },
    Entry {
        name: cow::NAME,
        seed: cow::SEED,
        about: cow::ABOUT,
        run: cow::run_common,
    },
    Entry {
        name: hash::NAME,
        seed: hash::SEED,
        about: hash::ABOUT,
        run: hash::run_common,
    },
    Entry {
        name: lru::NAME,
        seed: lru::SEED,
        about: lru::ABOUT,
        run: lru::run_common,
    },
    Entry {
        name: peers::NAME,
        seed: peers::SEED,
        about: peers::ABOUT,
        run: peers::run_common,
    },
    Entry {
        name: write::NAME,
        seed: write::SEED,
        about: write::ABOUT,
        run: write::run_common,
    },
];
