//! The hit-ratio sweep of `peers`: every contender's hit ratio over Zipf skews, beside what
//! two reference policies would hit on the very same trace.
//!
//! A policy's hit ratio does not depend on the thread count or the clock, so the sweep is one
//! thread replaying one trace per skew (thread 0's seed of the main measurement): the first
//! half warms the contender up, the second half is counted. Each contender is built fresh for
//! each skew, as in the main measurement, and every read is checked like the main
//! measurement's reads.
//!
//! The two references are computed on the same trace, with the same capacity (the budget in
//! blocks), counting the same second half:
//!
//! - **exact LFU** ([`perfect_lfu`]): every block's frequency counted over the whole trace so
//!   far (an evicted block keeps its count); the cache holds the most frequent blocks seen so
//!   far, ties going to the most recently used, and a missed block less frequent than every
//!   cached one is not admitted. Under the independent-reference model a Zipf trace follows,
//!   no online policy does better in the long run; it needs a counter per block ever seen,
//!   which a real cache cannot afford (TinyLFU, W-TinyLFU and the kernel's workingset
//!   detection are its bounded approximations).
//! - **Belady's optimum** ([`belady`]): evict the block whose next use is farthest away
//!   (and do not admit a missed block used later than every cached one): the most any policy
//!   could hit, knowing the future.
//!
//! When foliocache is behind the best peer, the two columns say how much of the gap any
//! online policy could close.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::contenders::{self, Kind, Reader};
use super::workload::{self, Content, Mix};
use super::Setup;
use crate::harness::LabResult;

/// One skew of the sweep.
pub struct Point {
    /// The Zipf exponent.
    pub skew: f64,
    /// Each contender's hit ratio (0 to 1) on the counted half.
    pub hits: Vec<(Kind, f64)>,
    /// The exact LFU's hit ratio on the counted half.
    pub lfu: f64,
    /// Belady's optimum on the counted half.
    pub belady: f64,
}

/// What the sweep found, and the reads it checked.
pub struct Sweep {
    /// One point per skew, in the order asked.
    pub points: Vec<Point>,
    /// Reads whose bytes were wrong.
    pub bad: u64,
    /// Errors of reads that failed (contender: message).
    pub errors: Vec<String>,
}

/// Runs the sweep over `skews` for `kinds`, replaying `2 * half` reads per contender and skew.
pub(super) fn run(kinds: &[Kind], setup: &Setup, skews: &[f64], half: usize) -> LabResult<Sweep> {
    let mut out = Sweep {
        points: Vec::new(),
        bad: 0,
        errors: Vec::new(),
    };
    for &skew in skews {
        let trace = workload::trace(Mix::Zipf, setup.blocks, skew, 2 * half, super::TRACE_SEED);
        let (warm, counted) = trace.split_at(half);
        let mut hits = Vec::new();
        for &kind in kinds {
            let (hit, bad, err) = replay_kind(kind, setup, warm, counted)?;
            out.bad += bad;
            out.errors
                .extend(err.map(|e| format!("{} (sweep, skew {skew}): {e}", kind.name())));
            hits.push((kind, hit));
        }
        out.points.push(Point {
            skew,
            hits,
            lfu: perfect_lfu(&trace, half, setup.budget_blocks),
            belady: belady(&trace, half, setup.budget_blocks),
        });
    }
    Ok(out)
}

/// Builds `kind` as the main measurement does and replays the trace through it.
fn replay_kind(
    kind: Kind,
    setup: &Setup,
    warm: &[u32],
    counted: &[u32],
) -> LabResult<(f64, u64, Option<String>)> {
    let file = setup.file.clone();
    let content = &setup.content;
    let qc = || contenders::QuickCache::new(file.clone(), setup.budget_blocks);
    Ok(match kind {
        Kind::QuickCache => replay(&qc(), content, warm, counted),
        Kind::QuickCacheCopy => replay(&contenders::QuickCacheCopy(qc()), content, warm, counted),
        Kind::Moka => replay(
            &contenders::Moka::new(file.clone(), setup.budget_blocks),
            content,
            warm,
            counted,
        ),
        Kind::KernelPread => replay(
            &contenders::KernelPread::new(file.clone()),
            content,
            warm,
            counted,
        ),
        Kind::Mmap => {
            let m = contenders::Mmap::new(&file, setup.blocks)
                .map_err(|e| crate::lab_err!("mmap of {}: {e}", setup.path.display()))?;
            replay(&m, content, warm, counted)
        }
        Kind::Foliocache | Kind::FoliocachePinned => {
            let c = contenders::Foliocache::new(
                &setup.path,
                setup.budget_bytes(),
                setup.ra_pages,
                setup.lru,
                kind == Kind::FoliocachePinned,
            )
            .map_err(|e| crate::lab_err!("foliocache: {e}"))?;
            replay(&c, content, warm, counted)
        }
    })
}

/// Reads `warm`, then `counted`, through `r` on this thread; the hit ratio of `counted`, the
/// reads with wrong bytes, and the first error (which ends the replay).
fn replay<R: Reader>(
    r: &R,
    content: &Arc<Content>,
    warm: &[u32],
    counted: &[u32],
) -> (f64, u64, Option<String>) {
    let mut local = match r.local() {
        Ok(l) => l,
        Err(e) => return (0.0, 0, Some(format!("setting up: {e}"))),
    };
    let mut bad = 0;
    let mut read_all = |local: &mut R::Local, trace: &[u32]| -> Result<(), String> {
        for &b in trace {
            if !r.with_block(local, b, |data| content.spot(b, data))? {
                bad += 1;
            }
        }
        Ok(())
    };
    if let Err(e) = read_all(&mut local, warm) {
        return (0.0, bad, Some(e));
    }
    let (shared0, local0) = (r.miss_counter(), R::local_misses(&local));
    if let Err(e) = read_all(&mut local, counted) {
        return (0.0, bad, Some(e));
    }
    let misses = match (shared0, r.miss_counter()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => R::local_misses(&local).saturating_sub(local0),
    };
    let n = counted.len().max(1) as f64;
    (1.0 - (misses as f64 / n).min(1.0), bad, None)
}

/// The hit ratio of `trace[half..]` under an exact (perfect) LFU of `cap` blocks (see the
/// module essay).
pub fn perfect_lfu(trace: &[u32], half: usize, cap: usize) -> f64 {
    let cap = cap.max(1);
    let mut count: HashMap<u32, u64> = HashMap::new();
    // Cached blocks ordered by (frequency, last use): the first is the victim.
    let mut order: BTreeSet<(u64, usize, u32)> = BTreeSet::new();
    let mut key: HashMap<u32, (u64, usize)> = HashMap::new();
    let mut hits = 0u64;
    for (i, &b) in trace.iter().enumerate() {
        let c = count.entry(b).or_insert(0);
        *c += 1;
        let c = *c;
        if let Some(&(oc, ol)) = key.get(&b) {
            hits += u64::from(i >= half);
            order.remove(&(oc, ol, b));
        } else if order.len() == cap {
            let &(vc, vl, v) = order.first().expect("a full cache has a first entry");
            if (vc, vl) > (c, i) {
                continue;
            }
            order.pop_first();
            key.remove(&v);
        }
        order.insert((c, i, b));
        key.insert(b, (c, i));
    }
    hits as f64 / (trace.len() - half).max(1) as f64
}

/// The hit ratio of `trace[half..]` under Belady's optimal replacement with `cap` blocks
/// ([`crate::policy::belady`]).
pub fn belady(trace: &[u32], half: usize, cap: usize) -> f64 {
    crate::policy::belady::hit_ratio_after(trace, half, cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-checked traces: a cycle one longer than the cache (LRU's worst case) and a hot
    /// block among cold ones.
    #[test]
    fn references_on_small_traces() {
        // Cycle 0 1 2 0 1 2 ... with room for 2: the optimum keeps 0 and 1 and never admits
        // 2, hitting two reads in three; the
        // exact LFU, whose counts stay level and whose ties go to the most recent block,
        // always evicts the block read next and hits none.
        let cycle: Vec<u32> = (0..600).map(|i| i % 3).collect();
        let opt = belady(&cycle, 300, 2);
        assert!((opt - 2.0 / 3.0).abs() < 0.01, "{opt}");
        assert_eq!(perfect_lfu(&cycle, 300, 2), 0.0);
        // Block 7 every other read, a new block in between: a cache of 1 holds 7.
        let hot: Vec<u32> = (0..1000)
            .map(|i| if i % 2 == 0 { 7 } else { 100 + i })
            .collect();
        for f in [perfect_lfu, belady] {
            let h = f(&hot, 500, 1);
            assert!((h - 0.5).abs() < 0.01, "{h}");
        }
    }

    /// On a Zipf trace the optimum is above the exact LFU, which is above nothing.
    #[test]
    fn belady_bounds_lfu_on_zipf() {
        let t = workload::trace(Mix::Zipf, 4096, 0.9, 1 << 15, 1);
        let (l, o) = (perfect_lfu(&t, 1 << 14, 512), belady(&t, 1 << 14, 512));
        assert!(0.2 < l && l <= o && o < 1.0, "lfu {l}, belady {o}");
    }
}
