//! The lab's scenarios, one per seed experiment.
//!
//! Each scenario module has the same shape, which the [`Scenario`] trait states and the
//! compiler checks: `Args`, its clap options with [`CommonArgs`] flattened in, implements
//! [`Scenario`] (its name, the seed file it reproduces, one line on what it measures, and
//! `run`: fill a [`Bench`](crate::harness::Bench) with its measurement, the variants
//! interleaved, then print the seed-shaped tables, write JSON and plot when asked and return
//! the report).
//!
//! [`REGISTRY`], written by the one `scenarios!` list below, is everything else: the
//! command line's subcommands ([`ScenarioCommand`], their options, `--help` text and order),
//! the order in which `foliocache-lab all` runs them, each with its command line's defaults
//! ([`Scenario::defaults`]), and the names `all --only` and the summary know.
//!
//! # Adding a scenario
//!
//! 1. Copy [`refcount`], the reference example, to `src/scenarios/NAME.rs` (or
//!    `NAME/mod.rs`): set `NAME`, `SEED`, `ABOUT` (also its `--help` line), its `Args` and
//!    `run`, and keep `super::scenario!();`. In `run`, open a
//!    [`Bench`](crate::harness::Bench) and give its `measure` one closure that measures one
//!    variant at one thread count and records the samples; the bench runs the interleaved
//!    rounds (variants × threads × runs), shows the progress line and adds the rows of
//!    medians. Add the comparisons, checks and tables, then `Bench::finish`.
//! 2. Take the variants of a library mechanism from its [`foliocache::Variant`] list
//!    (`ALL`, `name`, `from_name`), never as strings;
//!    [`seed_order`](crate::harness::seed_order) puts the seed's vanilla and patched first.
//! 3. Add `NAME` to the `scenarios!` list at the end of this module's code, where `all`
//!    should run it.
//!
//! That is all: `foliocache-lab NAME`, its `--help`, `all`, `all --only NAME` and the summary
//! follow, and the test below checks that its defaults parse. Document its stable variant,
//! metric and check names in its module (`docs/LAB-RESULTS.md`).

use std::fmt;

use crate::harness::{CommonArgs, LabResult, Report};

pub mod files;

/// A lab scenario: its options (`Args`, a clap `Args` with [`CommonArgs`] flattened in) and
/// how it runs.
pub trait Scenario: clap::Args + clap::FromArgMatches + Sized + 'static {
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

    /// The subcommand: its name, options and `--help` text.
    fn command() -> clap::Command {
        Self::augment_args(clap::Command::new(Self::NAME))
            .about(Self::ABOUT)
            .long_about(format!(
                "{}.\n\nSeed: {}. Variant, metric and check names: the documentation of \
                 `foliocache_lab::scenarios::{}`.",
                Self::ABOUT,
                Self::SEED,
                Self::NAME
            ))
    }

    /// The options as the command line gives them with no scenario option, `common` in
    /// place of the common ones: what `all` runs.
    fn defaults(common: &CommonArgs) -> LabResult<Self> {
        let cmd = Self::command().no_binary_name(true);
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

/// A scenario as the command line and `all` see it: its name, seed and summary, and what
/// to build its subcommand, parse its options and run it with, all from its [`Scenario`]
/// implementation ([`Entry::of`]).
pub struct Entry {
    /// Subcommand name.
    pub name: &'static str,
    /// Seed file reproduced.
    pub seed: &'static str,
    /// One line on what it measures.
    pub about: &'static str,
    /// Runs it with every scenario-specific option at its default ([`Scenario::defaults`]).
    pub run: fn(&CommonArgs) -> LabResult<Report>,
    /// Its subcommand ([`Scenario::command`]).
    pub command: fn() -> clap::Command,
    /// Its options parsed from its subcommand's matches, ready to run.
    parse: fn(&clap::ArgMatches) -> Result<ScenarioCommand, clap::Error>,
}

impl Entry {
    /// The entry of scenario `S`.
    pub const fn of<S: Scenario>() -> Entry {
        Entry {
            name: S::NAME,
            seed: S::SEED,
            about: S::ABOUT,
            run: run_defaults::<S>,
            command: S::command,
            parse: parse::<S>,
        }
    }

    /// The entry named `name`.
    pub fn find(name: &str) -> Option<&'static Entry> {
        REGISTRY.iter().find(|e| e.name == name)
    }
}

fn run_defaults<S: Scenario>(common: &CommonArgs) -> LabResult<Report> {
    S::defaults(common)?.run()
}

fn parse<S: Scenario>(matches: &clap::ArgMatches) -> Result<ScenarioCommand, clap::Error> {
    let args = S::from_arg_matches(matches)?;
    Ok(ScenarioCommand {
        name: S::NAME,
        common: args.common().clone(),
        run: Box::new(move || args.run()),
    })
}

/// A scenario subcommand as parsed from the command line, ready to run: the CLI's
/// `#[command(flatten)]` part, one subcommand per [`REGISTRY`] entry.
pub struct ScenarioCommand {
    /// The scenario's name.
    pub name: &'static str,
    /// Its common options, to check before the run ([`CommonArgs::check`]).
    pub common: CommonArgs,
    run: Box<dyn FnOnce() -> LabResult<Report>>,
}

impl ScenarioCommand {
    /// Measures, prints the tables, writes JSON and plot if asked.
    pub fn run(self) -> LabResult<Report> {
        (self.run)()
    }
}

impl fmt::Debug for ScenarioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScenarioCommand")
            .field("name", &self.name)
            .field("common", &self.common)
            .finish_non_exhaustive()
    }
}

impl clap::FromArgMatches for ScenarioCommand {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let (name, sub) = matches.subcommand().ok_or_else(|| {
            clap::Error::raw(
                clap::error::ErrorKind::MissingSubcommand,
                "a scenario is required",
            )
        })?;
        let entry = Entry::find(name).ok_or_else(|| {
            clap::Error::raw(
                clap::error::ErrorKind::InvalidSubcommand,
                format!("no scenario `{name}`"),
            )
        })?;
        (entry.parse)(sub)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Subcommand for ScenarioCommand {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        REGISTRY
            .iter()
            .fold(cmd, |cmd, e| cmd.subcommand((e.command)()))
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        Entry::find(name).is_some()
    }
}

/// The scenario list: declares each scenario's module and lists it in [`REGISTRY`], in the
/// order `all` runs them and `--help` lists them.
macro_rules! scenarios {
    ($($name:ident),+ $(,)?) => {
        $(pub mod $name;)+

        /// Every scenario, in the order `all` runs them.
        pub const REGISTRY: &[Entry] = &[$(Entry::of::<$name::Args>()),+];
    };
}

scenarios![refcount, pread, readseq, cow, hash, lru, peers, write, io, policy, bufmgr];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scenario's command-line defaults parse (no required option), and are the
    /// command line's (cow's anonymous memory in 2 MiB folios, as the seed measures).
    #[test]
    fn every_scenario_has_defaults_for_all() {
        let common = CommonArgs::default();
        for e in REGISTRY {
            let cmd = (e.command)().no_binary_name(true);
            let matches = cmd
                .try_get_matches_from(std::iter::empty::<String>())
                .unwrap_or_else(|err| panic!("{}: {err}", e.name));
            (e.parse)(&matches).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        }
        assert_eq!(cow::Args::defaults(&common).unwrap().order, 9);
        let mut names: Vec<_> = REGISTRY.iter().map(|e| e.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len(), "scenario names are unique");
    }
}
