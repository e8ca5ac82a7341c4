//! Real-thread stress of the index: lockless readers against inserters (one-by-one and
//! batched), evictors and truncaters on the same small range of one file, with a tiny arena
//! so frames are recycled constantly.
//!
//! Every folio is tagged (in `private`) with its first index before it is published and its
//! bytes are filled with a pattern of that index before it is marked uptodate. A reader that
//! gets a folio for index `i` checks the tag covers `i` (it is the folio inserted there, not
//! a recycled frame), waits for the lock, and if uptodate checks the bytes. At the end the
//! tree and the arena validate and the accounting returns to baseline.
#![cfg(not(loom))]

use foliocache::mm::folio::{Arena, ArenaConfig, FolioLocked, PAGE_SIZE};
use foliocache::mm::index::Index;
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::sync::{thread, Arc, AtomicBool, AtomicU64, Ordering};

const SPAN: u64 = 256;

fn fill(mut l: FolioLocked<'_>, first: u64) {
    let data = l.data_mut().expect("new folio is not uptodate");
    for (k, chunk) in data.chunks_mut(8).enumerate() {
        let v = first * 4096 + k as u64;
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    drop(l.end_read(true));
}

fn check(data: &[u8], first: u64) {
    for k in [0usize, 17, data.len() / 8 - 1] {
        let v = u64::from_le_bytes(data[k * 8..k * 8 + 8].try_into().unwrap());
        assert_eq!(v, first * 4096 + k as u64, "wrong bytes for index {first}");
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn stress(strategy: RefStrategy) {
    let iters = if cfg!(debug_assertions) {
        4_000
    } else {
        100_000
    };
    let mut c = ArenaConfig::new(192 * PAGE_SIZE, strategy);
    c.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(c).unwrap());
    let baseline = arena.validate().unwrap();
    let index = Arc::new(Index::new(arena.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let hits = Arc::new(AtomicU64::new(0));

    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (index, stop, hits) = (index.clone(), stop.clone(), hits.clone());
            thread::spawn(move || {
                let mut x = 0x1234_5678 + t;
                while !stop.load(Ordering::Relaxed) {
                    let i = xorshift(&mut x) % SPAN;
                    if let Some(f) = index.lookup(i) {
                        let first = f.private();
                        assert!(
                            first <= i && i < first + f.nr_pages() as u64,
                            "lookup({i}) returned a folio tagged {first} of {} pages",
                            f.nr_pages()
                        );
                        f.wait_locked();
                        if let Some(d) = f.data() {
                            check(d, first);
                            hits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();

    let writers: Vec<_> = (0..2)
        .map(|t| {
            let index = index.clone();
            thread::spawn(move || {
                let arena = index.arena().clone();
                let mut x = 0x9e37_79b9 + t;
                for _ in 0..iters {
                    let r = xorshift(&mut x);
                    match r % 8 {
                        // Batched insertion of up to 16 order-0 or order-2 folios.
                        0..=2 => {
                            let order = if r & 0x100 != 0 { 2 } else { 0 };
                            let nr = 1u64 << order;
                            let start = ((r >> 16) % SPAN) & !(nr - 1);
                            let n = ((r >> 32) % 16 + 1).min((SPAN - start) / nr);
                            let batch: Vec<_> = (0..n)
                                .map_while(|k| {
                                    let l = arena.alloc(order).ok()?.lock();
                                    l.set_private(start + k * nr);
                                    Some(l)
                                })
                                .collect();
                            let added = index
                                .add_folio_range(start, start + n * nr, &batch)
                                .unwrap_or(0);
                            for (k, l) in batch.into_iter().enumerate() {
                                if (k as u64) * nr < added {
                                    fill(l, start + k as u64 * nr);
                                }
                            }
                        }
                        // One folio.
                        3 | 4 => {
                            let i = (r >> 16) % SPAN;
                            if let Ok(f) = arena.alloc(0) {
                                let l = f.lock();
                                l.set_private(i);
                                if index.add_folio(&l, i).is_ok() {
                                    fill(l, i);
                                }
                            }
                        }
                        // Evict one (reclaim-like).
                        5 | 6 => {
                            let i = (r >> 16) % SPAN;
                            if let Some(f) = index.lookup(i) {
                                if let Ok(l) = f.try_lock() {
                                    let _ = index.evict(l);
                                }
                            }
                        }
                        // Truncate or invalidate a small range.
                        _ => {
                            let s = (r >> 16) % SPAN;
                            let e = s + (r >> 40) % 32 + 1;
                            if r & 0x200 != 0 {
                                index.truncate(s, e);
                            } else {
                                index.invalidate(s, e);
                            }
                        }
                    }
                }
            })
        })
        .collect();

    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let st = index.validate().unwrap();
    assert!(st.pages_inserted > 0);
    assert_eq!(arena.validate().unwrap().bad_pages, 0);
    drop(index);
    let end = arena.validate().unwrap();
    assert_eq!(end.allocated_pages, 0);
    assert_eq!(end.free_pages, baseline.free_pages);
    assert_eq!(end.bad_pages, 0);
}

#[test]
fn lookups_against_inserts_evicts_truncates_locked_bit() {
    stress(RefStrategy::LockedBit);
}

#[test]
fn lookups_against_inserts_evicts_truncates_cas_loop() {
    stress(RefStrategy::CasLoop);
}
