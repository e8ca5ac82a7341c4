//! The loom models: every concurrent protocol of the crate explored under
//! `RUSTFLAGS="--cfg loom"`, each beside a deliberately weakened variant the model must catch.
//!
//! They live in the library's unit-test build, not in `tests/`, because loom is a
//! dev-dependency: the [`sync`](crate::mm::sync) shim can only switch to loom in a build that has
//! the dev-dependencies, so that loom never reaches a downstream user's `Cargo.lock`. Run them
//! all with
//!
//! ```text
//! LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test --release -p foliocache --lib
//! ```
//!
//! or one file with a filter, e.g. `... --lib loom_tests::refcount`. The models use only the
//! crate's public API (`crate::` paths), as the integration tests they once were did.

mod async_ra;
// The readahead workers' queue, in-flight count and handshake (`cache/async_ra.rs`), compiled
// here on loom's primitives: the rest of `cache` is not built under loom.
#[path = "../cache/async_ra.rs"]
#[allow(dead_code)]
mod async_ra_code;
mod cow_reuse;
mod filetable;
mod folio;
mod index;
mod index_world;
mod latch;
mod lru;
mod percpu_counter;
mod percpu_ref;
mod pool;
mod rcu;
mod refcount;
mod seqcount;
mod snapshot;
mod truncate;
mod wal;
// The write-ahead rule's durable point (`cache/wal.rs`), a leaf of `cache`, on loom's
// primitives.
#[path = "../cache/wal.rs"]
#[allow(dead_code)]
mod wal_code;
mod workingset;
mod write;
