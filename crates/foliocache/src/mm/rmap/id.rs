//! Rmap IDs and their sub-IDs: the numbers that make "mapped exclusively" exact.
//!
//! # What it models
//!
//! `mm/rmap_id.c` of the November 2023 RFC (`docs/research/rmap-id.md` sections 2 and 4):
//! every address space gets a unique *rmap ID* below 2^24 (`mm->mm_rmap_id`, from an IDA,
//! freed when the space is dropped and reused later), and from it one *sub-ID* per rmap value
//! word of a large folio. Mapping or unmapping `n` pages of a folio by space `S` adds
//! `±n · subid_j(S)` to word `j` of the folio (modulo 2^64), next to `mapcount += ±n`. Then
//!
//! > the folio is mapped exclusively by `S` ⇔ `1 ≤ mapcount ≤ nr_pages` and
//! > `word_j == mapcount · subid_j(S)` for every `j`
//!
//! provided the sub-IDs have one property: **no sub-ID is the average of at most `P`
//! sub-IDs that are not all equal to it** (`P` = pages of the folio), and every sum of at
//! most `P` sub-IDs stays below 2^64.
//!
//! # The construction (rmap-id.md 2.5, not the RFC's)
//!
//! The RFC wrote the ID's binary digits in base `P+1`, which needs 3 words up to order 6 and
//! 4 up to order 9, and its posted 3-word variant for orders 6..9 overflows: 71 mappings from
//! 8 spaces wrap the sum by exactly 2^64 and it answers "exclusive" wrongly (the test
//! `rfc_three_value_counterexample` keeps that case as a regression). This module uses the
//! *norm-digit* construction instead:
//!
//! ```text
//!   coordinates v ∈ [0, t)^d          (chunks of the ID)
//!   s(v) = Σ_j v_j · B^j  +  N(v) · B^d,     N(v) = Σ_j (v_j − c)²,     B = P·(t−1) + 1
//! ```
//!
//! *Why it is exact.* A sum of `k ≤ P` sub-IDs has digit sums at most `P·(t−1) < B`, so no
//! digit carries and `Σ s(v_i) = k·s(x)` splits into `Σ v_i = k·x` (every coordinate) and
//! `Σ N(v_i) = k·N(x)`. Then `Σ |v_i − x|² = Σ N(v_i) − 2(x−c)·Σ(v_i − c) + k·N(x) = 0`, so
//! every `v_i = x`: the points lie on a paraboloid, every one of them an extreme point.
//! The words of one ID cover all its chunks and IDs are unique, so all `k` mappings come
//! from `S`. While `mapcount > P` the words may wrap, which is harmless: the test is not
//! applied then, and once `mapcount ≤ P` again the true sums are below 2^64 again.
//!
//! | folio orders | words | layout | worst sum (all `P` mappings at the largest sub-ID) |
//! |---|---|---|---|
//! | 0 | 0 | small folio: exclusive ⇔ mapcount = 1 | — |
//! | 1..=6 | 1 | [`SMALL_WORD`]: the 3 bytes of the ID, `t = 256`, `c = 128`, `B = 64·255+1` | 1.37·10^19 < 2^64 |
//! | 7..=15 | 2 | [`LARGE_WORD`] per 12-bit half, `d = 1`, `c = 2048`, `B = 32768·4095+1` | 2^64 − 4.5·10^15 |
//!
//! Both bounds are checked at compile time (`const` assertions below) and again in the
//! tests in exact 128-bit arithmetic.
//!
//! *Why these word counts are the fewest we can justify.* One word is the minimum, and it
//! suffices up to order 6. For order 7 a single word would need 2^24 points whose `P = 128`
//! -fold sums fit in 64 bits; the best one-word capacity of this family (binary digits and
//! norm digits with up to 6 coordinates) at order 7 is 22 bits (rmap-id.md 2.5; the test
//! `one_word_capacity_below_24_bits_from_order_7` recomputes it), and no construction
//! outside the family is known. So orders 7..=9 (the largest the arena supports) use two
//! words, the RFC as posted three or four.
//!
//! # Where sub-IDs live
//!
//! Computed once when the ID is allocated and kept in the [`RmapId`] (the RFC's
//! `mm_rmap_subid_*` in `mm_struct`), so an rmap update costs a multiplication by the batch
//! size and one add per word, never a table walk.

use crate::mm::sync::Mutex;

/// Bits of an rmap ID (`RMAP_ID_MAX` < 16M).
pub const RMAP_ID_BITS: u32 = 24;
/// The smallest ID handed out; 0 is the dummy ID of no space (`RMAP_ID_DUMMY`).
pub const RMAP_ID_MIN: u32 = 1;
/// The largest ID handed out.
pub const RMAP_ID_MAX: u32 = (1 << RMAP_ID_BITS) - 1;
/// The largest folio order the sub-ID construction is exact for (two words).
pub const RMAP_MAX_ORDER: u32 = 15;
/// The largest folio order one rmap word is exact for.
pub const ONE_WORD_MAX_ORDER: u32 = 6;

/// One norm-digit word: the parameters of `s(v) = Σ v_j B^j + N(v) B^d` (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WordLayout {
    /// `P`: the most mappings the word must sum exactly (pages of the largest folio).
    pub max_pages: u64,
    /// `d`: coordinates per word.
    pub dims: u32,
    /// `log2 t`: bits per coordinate (`t = 2^bits` values).
    pub coord_bits: u32,
    /// `c`: the centre of the norm digit.
    pub center: u64,
    /// `B`: the digit base, `P·(t−1) + 1` for carry-free sums.
    pub base: u64,
}

impl WordLayout {
    /// A layout with the carry-free base `P·(t−1)+1` and centre `t/2`.
    pub const fn new(max_pages: u64, dims: u32, coord_bits: u32) -> Self {
        let t = 1u64 << coord_bits;
        Self {
            max_pages,
            dims,
            coord_bits,
            center: t / 2,
            base: max_pages * (t - 1) + 1,
        }
    }

    /// The number of distinct sub-IDs (`t^d`).
    pub const fn nr_points(&self) -> u64 {
        1u64 << (self.dims * self.coord_bits)
    }

    /// The sub-ID of the point whose coordinates are packed in `coords` (coordinate `j` in
    /// bits `j·coord_bits ..`); higher bits are ignored. Computed modulo 2^64 (exact for a
    /// layout whose [`WordLayout::max_sum`] fits).
    pub const fn subid(&self, coords: u64) -> u64 {
        let mask = (1u64 << self.coord_bits) - 1;
        let mut s: u64 = 0;
        let mut pow: u64 = 1;
        let mut norm: u64 = 0;
        let mut j = 0;
        while j < self.dims {
            let v = (coords >> (j * self.coord_bits)) & mask;
            s = s.wrapping_add(v.wrapping_mul(pow));
            pow = pow.wrapping_mul(self.base);
            let dv = v.abs_diff(self.center);
            norm += dv * dv;
            j += 1;
        }
        s.wrapping_add(norm.wrapping_mul(pow))
    }

    /// The largest sum of `P` sub-IDs, exactly (the function is separable per coordinate, so
    /// the maximum is the sum of per-coordinate maxima).
    pub const fn max_sum(&self) -> u128 {
        let t = 1u64 << self.coord_bits;
        let mut top: u128 = 1;
        let mut j = 0;
        while j < self.dims {
            top *= self.base as u128;
            j += 1;
        }
        let mut total: u128 = 0;
        let mut pow: u128 = 1;
        let mut j = 0;
        while j < self.dims {
            let mut best: u128 = 0;
            let mut v = 0;
            while v < t {
                let dv = v.abs_diff(self.center) as u128;
                let x = v as u128 * pow + dv * dv * top;
                if x > best {
                    best = x;
                }
                v += 1;
            }
            total += best;
            pow *= self.base as u128;
            j += 1;
        }
        total * self.max_pages as u128
    }

    /// True if every sum of at most `P` sub-IDs is below 2^64 and the base is carry-free.
    pub const fn fits(&self) -> bool {
        let t = 1u64 << self.coord_bits;
        self.base > self.max_pages * (t - 1) && self.max_sum() < (1u128 << 64)
    }
}

/// The one-word layout for orders 1..=6: the three bytes of the ID as coordinates.
pub const SMALL_WORD: WordLayout = WordLayout::new(1 << ONE_WORD_MAX_ORDER, 3, 8);
/// The per-half layout for orders 7..=15: one 12-bit half of the ID per word.
pub const LARGE_WORD: WordLayout = WordLayout::new(1 << RMAP_MAX_ORDER, 1, 12);

const _: () = assert!(SMALL_WORD.fits(), "the order-6 word overflows");
const _: () = assert!(LARGE_WORD.fits(), "the order-15 words overflow");
const _: () = assert!(SMALL_WORD.nr_points() == 1 << RMAP_ID_BITS);
const _: () = assert!(LARGE_WORD.nr_points() * LARGE_WORD.nr_points() == 1 << RMAP_ID_BITS);

/// How many rmap value words a folio of `order` uses (0 for a small folio).
///
/// # Panics
/// If `order` exceeds [`RMAP_MAX_ORDER`].
#[inline]
pub const fn rmap_words(order: u32) -> usize {
    match order {
        0 => 0,
        1..=ONE_WORD_MAX_ORDER => 1,
        _ if order <= RMAP_MAX_ORDER => 2,
        _ => panic!("folio order above 15: the rmap-ID construction has no layout for it"),
    }
}

/// The sub-IDs of one rmap ID, for every word layout (`mm_rmap_subid_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubIds {
    /// The one word of orders 1..=6.
    pub small: u64,
    /// The two words of orders 7..=15.
    pub large: [u64; 2],
}

impl SubIds {
    /// `calc_rmap_subid`: the sub-IDs of `id`.
    pub const fn of(id: u32) -> Self {
        let id = id as u64;
        Self {
            small: SMALL_WORD.subid(id),
            large: [
                LARGE_WORD.subid(id & 0xfff),
                LARGE_WORD.subid((id >> 12) & 0xfff),
            ],
        }
    }

    /// The sub-IDs a folio of `order` adds (empty for a small folio).
    #[inline]
    pub fn for_order(&self, order: u32) -> &[u64] {
        match rmap_words(order) {
            0 => &[],
            1 => std::slice::from_ref(&self.small),
            _ => &self.large,
        }
    }
}

/// `__folio_large_mapped_exclusively` on values already read: are `mapcount` mappings with
/// these `words` all from the space with `subids`, for a folio of `order`?
///
/// Exact for every multiset of mappings (module docs). `mapcount ≤ 0` answers false.
#[inline]
pub fn words_match(order: u32, mapcount: i64, words: &[u64], subids: &SubIds) -> bool {
    if mapcount <= 0 || mapcount as u64 > 1u64 << order {
        return false;
    }
    let m = mapcount as u64;
    // The RFC's branch-free form: OR of the XORs against the targets.
    let diff = words
        .iter()
        .zip(subids.for_order(order))
        .fold(0u64, |acc, (w, s)| acc | (w ^ m.wrapping_mul(*s)));
    diff == 0
}

/// A space's rmap ID with its sub-IDs (`mm->mm_rmap_id` + `mm_rmap_subid_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmapId {
    id: u32,
    subids: SubIds,
}

impl RmapId {
    /// The ID `id` with its sub-IDs computed (for tests and tools; spaces get theirs from an
    /// [`RmapIdAllocator`]).
    ///
    /// # Panics
    /// If `id` is 0 or not below 2^24.
    pub const fn new(id: u32) -> Self {
        assert!(
            id >= RMAP_ID_MIN && id <= RMAP_ID_MAX,
            "rmap IDs are 1..2^24"
        );
        Self {
            id,
            subids: SubIds::of(id),
        }
    }

    /// The ID.
    #[inline]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Its sub-IDs.
    #[inline]
    pub fn subids(&self) -> &SubIds {
        &self.subids
    }
}

/// The rmap-ID allocator (`rmap_id_alloc` / `rmap_id_free` over an IDA): IDs
/// `1..2^24`, each freed ID reused before a new one is handed out.
#[derive(Debug, Default)]
pub struct RmapIdAllocator {
    inner: Mutex<IdaState>,
}

#[derive(Debug, Default)]
struct IdaState {
    next: u32,
    free: Vec<u32>,
    live: u32,
}

/// All 2^24 − 1 rmap IDs are in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmapIdsExhausted;

impl std::fmt::Display for RmapIdsExhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "all {RMAP_ID_MAX} rmap IDs are in use: drop address spaces that are no longer needed"
        )
    }
}

impl std::error::Error for RmapIdsExhausted {}

impl RmapIdAllocator {
    /// An allocator with every ID free.
    pub fn new() -> Self {
        Self::default()
    }

    /// `rmap_id_alloc`: a free ID (a recently freed one first).
    pub fn alloc(&self) -> Result<RmapId, RmapIdsExhausted> {
        let mut s = self.inner.lock();
        let id = match s.free.pop() {
            Some(id) => id,
            None => {
                if s.next == 0 {
                    s.next = RMAP_ID_MIN;
                }
                if s.next > RMAP_ID_MAX {
                    return Err(RmapIdsExhausted);
                }
                s.next += 1;
                s.next - 1
            }
        };
        s.live += 1;
        Ok(RmapId::new(id))
    }

    /// `rmap_id_free`: returns `id` for reuse. The caller guarantees no folio still carries
    /// a mapping by it (the space was torn down first).
    pub fn free(&self, id: RmapId) {
        let mut s = self.inner.lock();
        debug_assert!(
            s.live > 0 && !s.free.contains(&id.id),
            "double free of rmap ID"
        );
        s.live -= 1;
        s.free.push(id.id);
    }

    /// IDs currently handed out.
    pub fn live(&self) -> u32 {
        self.inner.lock().live
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
