//! The lab's scenarios, one per seed experiment.
//!
//! Each scenario module has the same shape, which the [`Scenario`] trait states and the
//! compiler checks: `Args`, its clap options with [`CommonArgs`] flattened in, implements
//! [`Scenario`] (its name, the seed file it reproduces, one line on what it measures, and
//! `run`: measure with the variants interleaved, print the seed-shaped table, write JSON and
//! plot when asked ([`crate::harness::emit`]), return the report).
//!
//! [`REGISTRY`] lists them for `foliocache-lab all`, each run with its command line's
//! defaults ([`Scenario::defaults`]). [`refcount`] is the reference example of this shape;
//! copy it to start a new scenario.
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
//! | [`policy`] | — | miss ratios on synthetic traces: the real cache against reference replacement policies (LRU, ARC, LIRS, S3-FIFO, W-TinyLFU, Belady), quick_cache and moka |

use crate::harness::{CommonArgs, LabResult, Report};

pub mod cow;
pub mod files;
pub mod hash;
pub mod lru;
pub mod peers;
pub mod policy;
pub mod pread;
pub mod readseq;
pub mod refcount;
pub mod write;

/// A lab scenario: its options (`Args`, a clap `Args` with [`CommonArgs`] flattened in) and
/// how it runs.
pub trait Scenario: clap::Args + clap::FromArgMatches + Sized {
    /// Subcommand name.
    const NAME: &'static str;
    /// Seed file reproduced (`"-"` for none).
    const SEED: &'static str;
    /// One line on what it measures.
    const ABOUT: &'static str;

    /// The options every scenario shares.
    fn common(&self) -> &CommonArgs;

    /// The same, to set them.
    fn common_mut(&mut self) -> &mut CommonArgs;

    /// Measures, prints the scenario's tables, writes JSON and plot if asked.
    fn run(&self) -> LabResult<Report>;

    /// The options as the command line gives them with no scenario option, `common` in
    /// place of the common ones: what `all` runs.
    fn defaults(common: &CommonArgs) -> LabResult<Self> {
        let cmd = Self::augment_args(clap::Command::new(Self::NAME).no_binary_name(true));
        let bad = |e: clap::Error| crate::lab_err!("{}: default options: {e}", Self::NAME);
        let matches = cmd
            .try_get_matches_from(std::iter::empty::<String>())
            .map_err(bad)?;
        let mut args = Self::from_arg_matches(&matches).map_err(bad)?;
        *args.common_mut() = common.clone();
        Ok(args)
    }
}

/// Implements [`Scenario`] for a module's `Args` from its `NAME`, `SEED`, `ABOUT` and `run`.
macro_rules! scenario {
    () => {
        impl $crate::scenarios::Scenario for Args {
            const NAME: &'static str = NAME;
            const SEED: &'static str = SEED;
            const ABOUT: &'static str = ABOUT;

            fn common(&self) -> &$crate::harness::CommonArgs {
                &self.common
            }

            fn common_mut(&mut self) -> &mut $crate::harness::CommonArgs {
                &mut self.common
            }

            fn run(&self) -> $crate::harness::LabResult<$crate::harness::Report> {
                run(self)
            }
        }
    };
}
pub(crate) use scenario;

/// A scenario as `all` runs it: name, seed, and a runner taking only the common options.
pub struct Entry {
    /// Subcommand name.
    pub name: &'static str,
    /// Seed file reproduced.
    pub seed: &'static str,
    /// One line on what it measures.
    pub about: &'static str,
    /// Runs it with every scenario-specific option at its default ([`Scenario::defaults`]).
    pub run: fn(&CommonArgs) -> LabResult<Report>,
}

impl Entry {
    /// The entry of scenario `S`.
    pub const fn of<S: Scenario>() -> Entry {
        Entry {
            name: S::NAME,
            seed: S::SEED,
            about: S::ABOUT,
            run: run_defaults::<S>,
        }
    }
}

fn run_defaults<S: Scenario>(common: &CommonArgs) -> LabResult<Report> {
    S::defaults(common)?.run()
}

/// Every scenario, in the order `all` runs them.
pub const REGISTRY: &[Entry] = &[
    Entry::of::<refcount::Args>(),
    Entry::of::<pread::Args>(),
    Entry::of::<readseq::Args>(),
    Entry::of::<cow::Args>(),
    Entry::of::<hash::Args>(),
    Entry::of::<lru::Args>(),
    Entry::of::<peers::Args>(),
    Entry::of::<write::Args>(),
    Entry::of::<policy::Args>(),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scenario's command-line defaults parse (no required option), and are the
    /// command line's (cow's anonymous memory in 2 MiB folios, as the seed measures).
    #[test]
    fn every_scenario_has_defaults_for_all() {
        let common = CommonArgs::default();
        refcount::Args::defaults(&common).unwrap();
        pread::Args::defaults(&common).unwrap();
        readseq::Args::defaults(&common).unwrap();
        assert_eq!(cow::Args::defaults(&common).unwrap().order, 9);
        hash::Args::defaults(&common).unwrap();
        lru::Args::defaults(&common).unwrap();
        peers::Args::defaults(&common).unwrap();
        write::Args::defaults(&common).unwrap();
        policy::Args::defaults(&common).unwrap();
        let mut names: Vec<_> = REGISTRY.iter().map(|e| e.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len(), "scenario names are unique");
    }
}
