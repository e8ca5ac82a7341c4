//! The foliocache lab: one scenario per seed patch thread, vanilla against patched, run
//! interleaved in one process; seed-shaped tables, JSON results and plots.
//!
//! Run `foliocache-lab --help`. Every scenario prints the seed's table shape and, with
//! `--json PATH`, writes the `foliocache-lab/1` document described in `docs/LAB-RESULTS.md`
//! and an SVG plot beside it.

pub mod cli;
pub mod harness;
pub mod policy;
pub mod published;
pub mod scenarios;
pub mod summary;
