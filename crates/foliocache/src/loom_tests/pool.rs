//! Loom model of the worker-pool engine's batch (`io::engine::pool`, PostgreSQL's
//! `method_worker.c` shape): the caller queues a batch's requests, the workers run them, and
//! the caller returns only after the last one is counted down, having seen every request's
//! result and every byte it moved.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p foliocache
//! --lib loom_tests::pool`.
//!
//! The real pool runs here on loom's threads: two workers, a batch of two reads, then the
//! pool's drop (shutdown and join). The backing counts its reads in `UnsafeCell`s, so a
//! caller that reads the count without a happens-before edge from each worker's read is a
//! causality error; the caller also checks each request's result and bytes.
//!
//! | step | code | pairs with |
//! |---|---|---|
//! | a worker's count-down | `Countdown::count_down`: the decrement under the batch's mutex, after the request ran | the caller's re-lock in `BatchWait::drop` |
//! | the caller's wait | `BatchWait::drop`: waits on the condvar until the count is zero | the last count-down's `notify_all` |
//! | the queue | `Shared::queue` under its mutex, `work` signalled after the batch is queued | a worker's wait in `worker` |
//!
//! The weakened variant must fail: workers that count a job down before running it let the
//! caller return with a request not yet run (its result missing, or the read count racing
//! the worker's write: loom's causality error).

use std::io;

use crate::io::engine::pool::Pool;
use crate::io::engine::Req;
use crate::io::Backing;
use crate::mm::sync::{model, Arc, UnsafeCell};

/// A backing whose reads fill the buffer with the offset's low byte and count themselves, one
/// count per offset (the model's requests read offsets 1 and 2, concurrently).
#[derive(Debug)]
struct Counted {
    reads: [UnsafeCell<u32>; 2],
}

// SAFETY: the count is only touched through loom's `UnsafeCell`, which checks every pair of
// accesses for a happens-before edge (the property under test); the pool orders them.
unsafe impl Sync for Counted {}

impl Backing for Counted {
    fn size(&self) -> io::Result<u64> {
        Ok(1 << 20)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // SAFETY: loom checks this write against the caller's read after the batch.
        self.reads[offset as usize - 1].with_mut(|p| unsafe { *p += 1 });
        buf.fill(offset as u8);
        Ok(buf.len())
    }
}

fn batch_model(start: fn(usize) -> io::Result<Pool>) {
    model(move || {
        let backing = Arc::new(Counted {
            reads: [UnsafeCell::new(0), UnsafeCell::new(0)],
        });
        let pool = start(2).expect("loom threads start");
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        {
            let mut reqs = [Req::read(1, vec![&mut a]), Req::read(2, vec![&mut b])];
            pool.run(&*backing, &mut reqs);
            for r in &mut reqs {
                assert!(
                    r.result.is_some(),
                    "the batch returned before a request ran"
                );
                assert_eq!(r.take_result().unwrap(), 4);
            }
        }
        assert_eq!((a, b), ([1; 4], [2; 4]));
        for count in &backing.reads {
            // SAFETY: loom reports this read if a worker's count is not ordered before it.
            assert_eq!(count.with(|p| unsafe { *p }), 1);
        }
        drop(pool);
    });
}

#[test]
fn a_batch_returns_after_every_request_ran() {
    batch_model(Pool::new);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn counting_down_before_running_is_caught() {
    batch_model(Pool::new_weakened);
}
