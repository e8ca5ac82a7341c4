//! The foliocache lab: one scenario per seed patch thread, vanilla against patched, run
//! interleaved in one process; seed-shaped tables, JSON results and plots.
//!
//! Run `foliocache-lab --help`. Every scenario prints the seed's table shape and, with
//! `--json PATH`, writes the `foliocache-lab/1` document described in `docs/LAB-RESULTS.md`
//! and an SVG plot beside it.
//!
//! - [`scenarios`]: one module per scenario, listed once (`scenarios!`, which writes
//!   [`scenarios::REGISTRY`]); adding a scenario is its module and one name in that list,
//!   see the module's "Adding a scenario".
//! - [`harness`]: what scenarios share, [`harness::Bench`] first: the report, progress line,
//!   interleaved rounds of variants × threads × runs and rows of medians every scenario
//!   fills with its measurement.
//! - [`cli`]: the command line, built from the registry, plus `all` and `validate`.

pub mod cli;
pub mod harness;
pub mod policy;
pub mod published;
pub mod scenarios;
pub mod summary;
