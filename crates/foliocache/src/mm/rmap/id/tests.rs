//! The proof obligations of the sub-ID construction, checked by machine:
//!
//! 1. exhaustively over all multisets for small parameters (and the same enumeration finds
//!    counterexamples in the negative controls: no norm digit, a base one too small);
//! 2. end to end with two words on a tiny ID space, every multiset, every candidate space;
//! 3. adversarially (first moment already matched) and randomly at the real sizes;
//! 4. the RFC's 3-value counterexample: it fools the RFC, it does not fool us;
//! 5. every possible sum below 2^64, in exact 128-bit arithmetic;
//! 6. the word-count argument: the best one-word capacity drops below 24 bits at order 7.

use super::*;
use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Calls `f` with every multiset (as a nondecreasing sequence) of `k` points from `0..n`.
fn for_each_multiset(n: u64, k: usize, f: &mut impl FnMut(&[u64])) {
    fn rec(n: u64, k: usize, from: u64, cur: &mut Vec<u64>, f: &mut impl FnMut(&[u64])) {
        if cur.len() == k {
            f(cur);
            return;
        }
        for p in from..n {
            cur.push(p);
            rec(n, k, p, cur, f);
            cur.pop();
        }
    }
    rec(n, k, 0, &mut Vec::with_capacity(k), f)
}

/// Counts multisets of size `1..=p` of points `0..n` whose sub-ID sum is `k` times the
/// sub-ID of a point not equal to all of them: the counterexamples to exactness.
fn counterexamples(n: u64, p: usize, subid: impl Fn(u64) -> u64) -> u64 {
    let mut by_value = HashMap::new();
    for x in 0..n {
        assert!(
            by_value.insert(subid(x) as u128, x).is_none(),
            "sub-IDs must be distinct"
        );
    }
    let mut bad = 0;
    for k in 1..=p {
        for_each_multiset(n, k, &mut |ms| {
            let sum: u128 = ms.iter().map(|&v| subid(v) as u128).sum();
            if sum % k as u128 == 0 {
                if let Some(&x) = by_value.get(&(sum / k as u128)) {
                    if ms.iter().any(|&v| v != x) {
                        bad += 1;
                    }
                }
            }
        });
    }
    bad
}

#[test]
fn exhaustive_small_parameters_have_no_counterexample() {
    // (P, d, bits per coordinate)
    for (p, d, bits) in [
        (4u64, 2u32, 1u32),
        (4, 2, 2),
        (3, 3, 2),
        (8, 1, 3),
        (6, 2, 2),
        (16, 1, 2),
        (5, 1, 4),
        (2, 3, 3),
    ] {
        let l = WordLayout::new(p, d, bits);
        assert!(l.fits());
        let bad = counterexamples(l.nr_points(), p as usize, |v| l.subid(v));
        assert_eq!(bad, 0, "layout {l:?}");
    }
}

#[test]
fn negative_controls_are_caught() {
    // Without the norm digit the midpoint of two points is their average.
    let l = WordLayout::new(4, 2, 2);
    let pow = l.base.pow(l.dims);
    let no_norm = |v: u64| {
        let s = l.subid(v);
        let full = s / pow; // the norm digit (no carries: it is the top digit)
        s - full * pow
    };
    assert!(counterexamples(l.nr_points(), 4, no_norm) > 0);
    // A base below the carry-free bound lets digits carry (carry-freedom is sufficient, not
    // necessary: one below still happens to work for these parameters, two below fails).
    let mut small_base = WordLayout::new(2, 2, 2);
    small_base.base -= 2;
    assert!(!small_base.fits());
    assert!(counterexamples(small_base.nr_points(), 2, |v| small_base.subid(v)) > 0);
    // The RFC's binary digits in base P instead of P + 1.
    let p = 4u64;
    let base_p = |v: u64| {
        (0..3)
            .map(|b| ((v >> b) & 1) * p.pow(b as u32))
            .sum::<u64>()
    };
    assert!(counterexamples(8, p as usize, base_p) > 0);
    let base_p1 = |v: u64| {
        (0..3)
            .map(|b| ((v >> b) & 1) * (p + 1).pow(b as u32))
            .sum::<u64>()
    };
    assert_eq!(counterexamples(8, p as usize, base_p1), 0);
}

#[test]
fn two_words_end_to_end_on_a_tiny_id_space() {
    // IDs of two 2-bit chunks, each chunk its own word, P = 4: every multiset of IDs, every
    // candidate space, the word test must equal the truth.
    let l = WordLayout::new(4, 1, 2);
    let ids = 16u64;
    let word = |id: u64, j: u32| l.subid((id >> (2 * j)) & 3);
    let mut checked = 0;
    for k in 1..=4usize {
        for_each_multiset(ids, k, &mut |ms| {
            let w: [u64; 2] = [0, 1].map(|j| {
                ms.iter()
                    .fold(0u64, |acc, &id| acc.wrapping_add(word(id, j)))
            });
            for x in 0..ids {
                let claimed = (0..2).all(|j| w[j as usize] == (k as u64).wrapping_mul(word(x, j)));
                let truth = ms.iter().all(|&id| id == x);
                assert_eq!(claimed, truth, "multiset {ms:?} candidate {x}");
                checked += 1;
            }
        });
    }
    assert!(checked > 10_000);
}

/// The words a multiset of (id, pages) mappings leaves on a folio of `order`.
fn words_of(order: u32, maps: &[(u32, u64)]) -> (i64, Vec<u64>) {
    let n = rmap_words(order);
    let mut w = vec![0u64; n];
    let mut m = 0i64;
    for &(id, pages) in maps {
        let s = SubIds::of(id);
        for (wj, sj) in w.iter_mut().zip(s.for_order(order)) {
            *wj = wj.wrapping_add(pages.wrapping_mul(*sj));
        }
        m += pages as i64;
    }
    (m, w)
}

fn truth(maps: &[(u32, u64)], x: u32) -> bool {
    maps.iter().any(|&(_, p)| p > 0) && maps.iter().all(|&(id, p)| p == 0 || id == x)
}

fn check_all_candidates(order: u32, maps: &[(u32, u64)], extra: &[u32]) {
    let (m, w) = words_of(order, maps);
    for x in maps.iter().map(|&(id, _)| id).chain(extra.iter().copied()) {
        let got = words_match(order, m, &w, &SubIds::of(x));
        assert_eq!(got, truth(maps, x), "order {order} maps {maps:?} x {x}");
    }
}

/// Moves each coordinate of `x` (chunks of `bits`, `n` chunks) by `+delta` or `-delta`,
/// clamped so both stay in range; returns (x + delta, x - delta).
fn mirror(x: u32, delta: &[i64], bits: u32) -> (u32, u32) {
    let mask = (1i64 << bits) - 1;
    let (mut a, mut b) = (0u32, 0u32);
    for (j, &d) in delta.iter().enumerate() {
        let v = (i64::from(x) >> (bits * j as u32)) & mask;
        let d = d.min(mask - v).min(v);
        a |= ((v + d) as u32) << (bits * j as u32);
        b |= ((v - d) as u32) << (bits * j as u32);
    }
    (a, b)
}

#[test]
fn adversarial_first_moment_matched_at_real_sizes() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0002);
    let rounds = if cfg!(debug_assertions) {
        3_000
    } else {
        30_000
    };
    for round in 0..rounds {
        let order = [1, 2, 4, 6, 7, 9, 12, 15][round % 8];
        let p = 1u64 << order;
        // Coordinates as the layout of this order sees them.
        let (bits, chunks) = if order <= ONE_WORD_MAX_ORDER {
            (8, 3)
        } else {
            (12, 2)
        };
        let x = rng.random_range(RMAP_ID_MIN..=RMAP_ID_MAX);
        let mut maps: Vec<(u32, u64)> = Vec::new();
        let mut budget = p;
        // Mirrored pairs keep the coordinate sums equal to k·x exactly.
        let pairs = rng.random_range(1..=3u32);
        for _ in 0..pairs {
            let span = (1i64 << bits) - 1;
            let delta: Vec<i64> = (0..chunks)
                .map(|_| {
                    let scale = 1i64 << rng.random_range(0..bits);
                    rng.random_range(0..=span.min(scale))
                })
                .collect();
            let (a, b) = mirror(x, &delta, bits);
            if a == b || a == 0 || b == 0 || budget < 2 {
                continue;
            }
            let n = rng.random_range(1..=(budget / 2).min(64));
            maps.push((a, n));
            maps.push((b, n));
            budget -= 2 * n;
        }
        if maps.is_empty() {
            continue;
        }
        if budget > 0 && rng.random_bool(0.7) {
            maps.push((x, rng.random_range(1..=budget)));
        }
        check_all_candidates(order, &maps, &[x]);
    }
}

#[test]
fn random_multisets_at_real_sizes() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0003);
    let rounds = if cfg!(debug_assertions) {
        5_000
    } else {
        50_000
    };
    for round in 0..rounds {
        let order = 1 + (round % RMAP_MAX_ORDER as usize) as u32;
        let p = 1u64 << order;
        let pool: Vec<u32> = (0..rng.random_range(1..=4))
            .map(|_| rng.random_range(RMAP_ID_MIN..=RMAP_ID_MAX))
            .collect();
        let mut maps = Vec::new();
        let mut left = rng.random_range(1..=p);
        while left > 0 {
            let n = rng.random_range(1..=left);
            maps.push((pool[rng.random_range(0..pool.len())], n));
            left -= n;
        }
        let stranger = rng.random_range(RMAP_ID_MIN..=RMAP_ID_MAX);
        check_all_candidates(order, &maps, &[stranger]);
    }
}

#[test]
fn all_pairs_of_the_large_word() {
    // k = 2 over every unordered pair of the 4096 chunk values of the order-15 word: the sum
    // of two different sub-IDs is never twice a sub-ID (the first digit forces the midpoint).
    let l = LARGE_WORD;
    let s: Vec<u64> = (0..4096).map(|v| l.subid(v)).collect();
    for a in 0..4096usize {
        for b in a + 1..4096 {
            if (a + b) % 2 == 0 {
                let mid = (a + b) / 2;
                assert_ne!(s[a].wrapping_add(s[b]), s[mid].wrapping_mul(2), "{a} {b}");
            }
        }
    }
}

/// The RFC's posted 3-value sub-ID (patch 11, orders 6..9): the binary digits of an 8-bit
/// chunk of the ID, read in base 513. Its largest value times 512 is about 2^72.
fn rfc_three_value_subid(id: u32, j: u32) -> u64 {
    let chunk = (id >> (8 * j)) & 0xff;
    (0..8)
        .filter(|b| chunk >> b & 1 == 1)
        .fold(0u64, |acc, b| acc.wrapping_add(513u64.wrapping_pow(b)))
}

#[test]
fn rfc_three_value_counterexample() {
    // rmap-id.md 2.4: 2^64 = 2·(513 − 1)^7 has base-513 digits [−2, 14, −42, 70, −70, 42,
    // −14, 2]. The tested space x has chunk 0 = 0x55 and maps 1 page; seven other spaces
    // share chunks 1 and 2 with it and map 2, 12, 14, 14, 14, 12, 2 pages. Per bit of chunk
    // 0 the counts add up to 71·x_b + digit_b, so the true sum is 71·subid(x) + 2^64.
    let hi = (1 << 8) | (2 << 16);
    let x = 0x55 | hi;
    let maps: Vec<(u32, u64)> = [
        (0x55, 1),
        (0xef, 2),
        (0x6f, 12),
        (0x6d, 14),
        (0x69, 14),
        (0x49, 14),
        (0x09, 12),
        (0x08, 2),
    ]
    .into_iter()
    .map(|(c, n)| (c | hi, n))
    .collect();
    let k: u64 = maps.iter().map(|m| m.1).sum();
    assert_eq!(k, 71);
    assert_eq!(
        maps.iter()
            .map(|m| m.0)
            .collect::<std::collections::HashSet<_>>()
            .len(),
        8
    );

    // The exact sum of chunk 0 overshoots k·subid(x) by exactly 2^64 ...
    let exact: u128 = maps
        .iter()
        .map(|&(id, n)| {
            let chunk = id & 0xff;
            n as u128
                * (0..8)
                    .filter(|b| chunk >> b & 1 == 1)
                    .map(|b| 513u128.pow(b))
                    .sum::<u128>()
        })
        .sum();
    let target: u128 = 71
        * (0..8)
            .filter(|b| 0x55 >> b & 1 == 1)
            .map(|b| 513u128.pow(b))
            .sum::<u128>();
    assert_eq!(exact, target + (1u128 << 64));

    // ... so the RFC's wrapped words equal k·subid(x) in all three values: "exclusive".
    let rfc_says_exclusive = (0..3).all(|j| {
        let w = maps.iter().fold(0u64, |acc, &(id, n)| {
            acc.wrapping_add(n.wrapping_mul(rfc_three_value_subid(id, j)))
        });
        w == k.wrapping_mul(rfc_three_value_subid(x, j))
    });
    assert!(rfc_says_exclusive, "the RFC's 3-value variant is fooled");

    // Ours answers "shared" at every order the case is valid for (k = 71 ≤ P).
    for order in 7..=9 {
        let (m, w) = words_of(order, &maps);
        assert_eq!(m, 71);
        assert!(!words_match(order, m, &w, &SubIds::of(x)), "order {order}");
    }
}

#[test]
fn every_possible_sum_stays_below_2_pow_64() {
    for order in 1..=RMAP_MAX_ORDER {
        let layout = if order <= ONE_WORD_MAX_ORDER {
            SMALL_WORD
        } else {
            LARGE_WORD
        };
        // P(order) ≤ the layout's P, so its worst sum bounds this order's.
        assert!(1u64 << order <= layout.max_pages);
        assert!(layout.max_sum() < 1u128 << 64, "order {order}");
        // And the bound is attained by real sub-IDs: the largest sub-ID times P.
        let largest = (0..layout.nr_points().min(1 << 12))
            .map(|v| layout.subid(v) as u128)
            .chain([
                layout.subid(0) as u128,
                layout.subid(layout.nr_points() - 1) as u128,
            ])
            .max()
            .unwrap();
        assert!(largest * layout.max_pages as u128 <= layout.max_sum());
    }
    // The margins the module docs quote.
    assert!(SMALL_WORD.max_sum() < 13_676_074_639_014_494_209);
    assert_eq!((1u128 << 64) - LARGE_WORD.max_sum(), 4_503_462_188_417_024);
    // One step further each layout no longer fits: the order boundaries are tight.
    assert!(!WordLayout::new(128, 3, 8).fits());
    assert!(!WordLayout::new(1 << 16, 1, 12).fits());
}

/// The largest `t` (coordinate values) for which the norm-digit word with `d` coordinates
/// fits for `p` pages, or 0.
fn largest_t(p: u128, d: u32) -> u128 {
    let fits = |t: u128| -> bool {
        let b = p * (t - 1) + 1;
        let c = t / 2;
        let Some(top) = b.checked_pow(d) else {
            return false;
        };
        let mut total: u128 = 0;
        for j in 0..d {
            let pow = b.pow(j);
            let m = [0, t - 1]
                .into_iter()
                .map(|v| {
                    let dv = v.abs_diff(c);
                    (v * pow).checked_add(dv * dv * top)
                })
                .max()
                .flatten();
            let Some(m) = m else { return false };
            total = match total.checked_add(m) {
                Some(t) => t,
                None => return false,
            };
        }
        total.checked_mul(p).is_some_and(|s| s < 1u128 << 64)
    };
    if !fits(2) {
        return 0;
    }
    let (mut lo, mut hi) = (2u128, 4u128);
    while fits(hi) {
        lo = hi;
        hi *= 2;
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            lo = mid
        } else {
            hi = mid
        }
    }
    lo
}

/// log2 of the most IDs one word can serve at `order`, over the binary-digit family and the
/// norm-digit family with 1..=6 coordinates.
fn one_word_capacity_bits(order: u32) -> f64 {
    let p = 1u128 << order;
    let mut best: f64 = 0.0;
    // Binary digits in base P + 1: (P+1)^d − 1 < 2^64.
    let mut d = 0;
    while (p + 1).pow(d + 1) - 1 < 1u128 << 64 {
        d += 1;
    }
    best = best.max(d as f64);
    for d in 1..=6 {
        let t = largest_t(p, d);
        if t >= 2 {
            best = best.max(d as f64 * (t as f64).log2());
        }
    }
    best
}

#[test]
fn one_word_capacity_below_24_bits_from_order_7() {
    for order in 1..=6 {
        assert!(one_word_capacity_bits(order) >= 24.0, "order {order}");
    }
    for order in 7..=15 {
        assert!(one_word_capacity_bits(order) < 24.0, "order {order}");
    }
    assert!((one_word_capacity_bits(7) - 22.0).abs() < 0.01);
    assert!((one_word_capacity_bits(9) - 19.0).abs() < 0.05);
}

#[test]
fn allocator_reuses_freed_ids() {
    let a = RmapIdAllocator::new();
    let x = a.alloc().unwrap();
    let y = a.alloc().unwrap();
    assert_eq!((x.id(), y.id()), (1, 2));
    assert_eq!(a.live(), 2);
    a.free(x);
    assert_eq!(a.alloc().unwrap().id(), 1);
    assert_eq!(a.alloc().unwrap().id(), 3);
    assert_eq!(a.live(), 3);
    assert_eq!(RmapId::new(RMAP_ID_MAX).subids(), &SubIds::of(RMAP_ID_MAX));
}

#[test]
fn allocator_reports_exhaustion() {
    let a = RmapIdAllocator::new();
    a.inner.lock().next = RMAP_ID_MAX;
    let last = a.alloc().unwrap();
    assert_eq!(last.id(), RMAP_ID_MAX);
    let e = a.alloc().unwrap_err();
    assert!(e.to_string().contains("drop address spaces"));
    a.free(last);
    assert_eq!(a.alloc().unwrap().id(), RMAP_ID_MAX);
}

#[test]
fn words_per_order() {
    assert_eq!(rmap_words(0), 0);
    assert_eq!(rmap_words(1), 1);
    assert_eq!(rmap_words(6), 1);
    assert_eq!(rmap_words(7), 2);
    assert_eq!(rmap_words(9), 2);
    assert_eq!(rmap_words(15), 2);
    assert!(std::panic::catch_unwind(|| rmap_words(16)).is_err());
}
