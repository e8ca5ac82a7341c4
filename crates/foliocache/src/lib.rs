//! # foliocache
//!
//! A userspace page cache built the way Linux builds its own, and the mechanisms of five Linux
//! memory-management patch threads that make it scale, each implemented twice (the kernel's
//! vanilla behaviour and the patch's improvement) and selectable at run time.
//!
//! | module | mechanism | kernel model |
//! |---|---|---|
//! | [`sync`] | atomics, locks, threads; std or loom | — |
//! | [`space`] | address spaces, rmap IDs, exact mapped-shared detection, COW | `rmap.c`, `memory.c`, RFC `rmap_id.c` (seed 002) |
//! | [`seqcount`] | atomic seqcount: concurrent adding writers, exclusive fast path | RFC `atomic_seqcount.h` (seed 002) |
//!
//! The crate is being built issue by issue; the table grows with it (see the README).

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod seqcount;
pub mod space;
pub mod sync;
