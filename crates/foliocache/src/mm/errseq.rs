//! Writeback error sequences (`lib/errseq.c`): one 32-bit word per file that records the
//! latest writeback error so that every open handle hears of it exactly once.
//!
//! # Why
//!
//! A writeback error happens long after the `write` whose data it lost, in whatever thread
//! ran the writeback. Before Linux 4.13 the inode kept one "an error happened" flag, and the
//! first `fsync` to look cleared it: other descriptors of the file, and a later `fsync` on the
//! one that saw it, were told all was well (PostgreSQL's "fsyncgate", 2018). `errseq_t`
//! replaced the flag with a sequence each reader samples and advances on its own.
//!
//! # The word
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 0..12 | errno | the latest error's `errno` (Linux errnos are below 4096, `MAX_ERRNO`) |
//! | 12 | [`SEEN`] | someone has been told of the current error |
//! | 13..32 | counter | bumped when an error is recorded after the previous one was seen |
//!
//! - [`ErrSeq::set`] (`errseq_set`) stores the errno, clears SEEN, and bumps the counter only
//!   if SEEN was set: a storm of errors nobody looked at costs no counter values, so the
//!   counter wraps only after 2^19 *observed* errors.
//! - A handle samples the word when it opens ([`ErrSeq::sample`], `errseq_sample`): the value,
//!   or 0 if the current error was never seen, so that an error that no one has reported yet
//!   (say, background writeback failed after the writer closed its handle) reaches the next
//!   opener instead of nobody.
//! - At each sync the handle compares its sample with the word
//!   ([`ErrSeq::check_and_advance`], `errseq_check_and_advance`): different means an error
//!   was recorded since; it reports that errno, sets SEEN in the word and stores the new value
//!   as its sample, so it reports this error once, and other handles (whose samples are older)
//!   still report it once each.
//!
//! # Ordering
//!
//! The word carries no data besides itself: a reader needs only to see *some* later value
//! (every RMW here reads the latest in the word's modification order), so every access is
//! `Relaxed`. What makes a sync report an error that happened before it is not this word's
//! ordering but the sync's own waiting: it waits for the writeback it started (and for any in
//! flight) under locks whose release/acquire pairs order the `set` of a failed write before
//! the waiter's check.

use crate::mm::sync::{AtomicU32, Ordering};

/// Bits holding the errno (`MAX_ERRNO`, 4095).
pub const ERRNO_MASK: u32 = (1 << 12) - 1;
/// `ERRSEQ_SEEN`: the current error has been reported to someone.
pub const SEEN: u32 = 1 << 12;
/// `ERRSEQ_CTR_INC`: one step of the counter.
pub const CTR_INC: u32 = 1 << 13;

/// A writeback error sequence (`errseq_t`): see the module docs.
#[derive(Debug, Default)]
pub struct ErrSeq(AtomicU32);

impl ErrSeq {
    /// A sequence with no error recorded.
    pub fn new() -> ErrSeq {
        ErrSeq(AtomicU32::new(0))
    }

    /// `errseq_set`: records `errno` (1..=4095; 0 is ignored, larger is clamped to EIO) as the
    /// latest error. Returns the new word.
    pub fn set(&self, errno: i32) -> u32 {
        if errno == 0 {
            return self.0.load(Ordering::Relaxed);
        }
        let errno = if errno < 0 || errno as u32 > ERRNO_MASK {
            libc::EIO as u32
        } else {
            errno as u32
        };
        let mut old = self.0.load(Ordering::Relaxed);
        loop {
            let mut new = (old & !(ERRNO_MASK | SEEN)) | errno;
            if old & SEEN != 0 {
                new = new.wrapping_add(CTR_INC);
            }
            if new == old {
                return new;
            }
            // ORDERING: Relaxed (module docs: the word orders nothing but itself).
            match self
                .0
                .compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return new,
                // Another setter stored exactly what we would have: the same error, once.
                Err(cur) if cur == new => return new,
                Err(cur) => old = cur,
            }
        }
    }

    /// `errseq_sample`: the value a new handle starts from (0 if the current error was never
    /// seen, so the handle will report it).
    pub fn sample(&self) -> u32 {
        let v = self.0.load(Ordering::Relaxed);
        if v & SEEN == 0 {
            0
        } else {
            v
        }
    }

    /// `errseq_check`: the errno recorded since `since` was sampled, without advancing.
    pub fn check(&self, since: u32) -> Option<i32> {
        let cur = self.0.load(Ordering::Relaxed);
        (cur != since).then_some((cur & ERRNO_MASK) as i32)
    }

    /// `errseq_check_and_advance`: if an error was recorded since `*since`, marks it seen,
    /// moves `*since` to it and returns its errno (once per sample holder). The caller
    /// serialises calls on one `since` (a handle's lock, as `struct file`'s `f_lock`).
    pub fn check_and_advance(&self, since: &mut u32) -> Option<i32> {
        let old = self.0.load(Ordering::Relaxed);
        if old == *since {
            return None;
        }
        let new = old | SEEN;
        if new != old {
            // Losing this race is fine: whoever won stored SEEN or a newer error, which we
            // (or the next check) report.
            // ORDERING: Relaxed (module docs).
            let _ = self
                .0
                .compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed);
        }
        *since = new;
        Some((new & ERRNO_MASK) as i32)
    }

    /// Whether an error is recorded that no one has been told of yet.
    pub fn unseen(&self) -> bool {
        let v = self.0.load(Ordering::Relaxed);
        v & ERRNO_MASK != 0 && v & SEEN == 0
    }

    /// The raw word (diagnostics and tests).
    pub fn raw(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Deliberately broken variants the loom models must catch (never used elsewhere).
#[cfg(loom)]
#[doc(hidden)]
pub mod weakened {
    use super::*;

    /// Linux before 4.13: one flag that the first reporter clears (`AS_EIO` test-and-clear).
    #[derive(Debug, Default)]
    pub struct ClearOnReport(AtomicU32);

    impl ClearOnReport {
        /// Records an error.
        pub fn set(&self, errno: i32) {
            self.0.store(errno as u32, Ordering::Relaxed);
        }

        /// Reports and clears it (whoever comes first).
        pub fn check_and_clear(&self) -> Option<i32> {
            let v = self.0.swap(0, Ordering::Relaxed);
            (v != 0).then_some(v as i32)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn each_sampler_reports_each_error_once() {
        let e = ErrSeq::new();
        let (mut a, mut b) = (e.sample(), e.sample());
        assert_eq!(e.check_and_advance(&mut a), None);
        e.set(libc::EIO);
        assert_eq!(e.check(a), Some(libc::EIO));
        assert_eq!(e.check_and_advance(&mut a), Some(libc::EIO));
        assert_eq!(e.check_and_advance(&mut a), None, "once for a");
        // A handle opened after the error was seen does not report it...
        let mut late = e.sample();
        assert_eq!(e.check_and_advance(&mut late), None);
        // ...b, open before, still does.
        assert_eq!(e.check_and_advance(&mut b), Some(libc::EIO));
        assert_eq!(e.check_and_advance(&mut b), None);
        // The same errno again after it was seen is a new error for everyone.
        e.set(libc::EIO);
        assert_eq!(e.check_and_advance(&mut a), Some(libc::EIO));
        assert_eq!(e.check_and_advance(&mut late), Some(libc::EIO));
        assert_eq!(e.check_and_advance(&mut b), Some(libc::EIO));
    }

    #[test]
    fn an_error_nobody_saw_reaches_the_next_opener() {
        let e = ErrSeq::new();
        e.set(libc::ENOSPC);
        let mut opener = e.sample();
        assert_eq!(opener, 0);
        assert_eq!(e.check_and_advance(&mut opener), Some(libc::ENOSPC));
        assert_eq!(e.check_and_advance(&mut opener), None);
    }

    #[test]
    fn unseen_errors_do_not_consume_counter_values() {
        let e = ErrSeq::new();
        for _ in 0..1000 {
            e.set(libc::EIO);
            e.set(libc::ENOSPC);
        }
        assert_eq!(e.raw() & !ERRNO_MASK, 0, "no counter step without a reader");
        let mut s = 0;
        assert_eq!(e.check_and_advance(&mut s), Some(libc::ENOSPC));
        e.set(libc::EIO);
        assert_eq!(e.raw() >> 13, 1);
        assert_eq!(e.set(0), e.raw(), "0 is no error");
        e.set(-5);
        assert_eq!(
            e.raw() & ERRNO_MASK,
            libc::EIO as u32,
            "out of range is EIO"
        );
    }
}
