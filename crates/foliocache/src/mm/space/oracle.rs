//! The oracle: what the sharer tracking answers, checked against a brute-force scan of every
//! page table of a family.
//!
//! Two checks, both for tests and the lab (they need a quiescent family, or oracle mode,
//! [`SpaceConfig::oracle`](super::SpaceConfig::oracle), which serialises every operation):
//!
//! - [`Spaces::check_oracle`] / [`Spaces::sharing_snapshot`]: after the fact, every mapped
//!   folio's mappers, counters and "mapped exclusively" answers against the scan;
//! - per decision, in oracle mode: every copy-on-write fault's reuse-or-copy decision against
//!   the scan at that moment ([`Spaces::oracle_decisions`]).

use std::collections::HashMap;

use super::pagetable::PageTable;
use super::{Mm, Spaces, SpacesInner};
use crate::mm::rmap::id::RmapId;
use crate::mm::sync::Ordering;

/// The mappers of one folio found by scanning every page table, and the tracking's answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FolioSharing {
    /// The folio's pfn.
    pub pfn: u32,
    /// Its order.
    pub order: u32,
    /// Its mapcount as tracked.
    pub mapcount: i64,
    /// Its reference count.
    pub refcount: u32,
    /// (rmap ID, mappings) of every space that maps it, by ID.
    pub mappers: Vec<(u32, u64)>,
    /// `mapped_exclusively` as answered for each mapper, same order.
    pub answers: Vec<bool>,
    /// `validate()` of the counters against the scan (`None` = consistent).
    pub counter_error: Option<String>,
}

/// The outcome of [`Spaces::check_oracle`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OracleReport {
    /// Folios mapped somewhere.
    pub folios: u64,
    /// (folio, mapper) answers compared.
    pub answers: u64,
    /// "Exclusive" answered while another space maps the folio (never allowed).
    pub wrong_exclusive: u64,
    /// "Shared" answered by an exact strategy for a folio one space maps (mapcount ≤ pages).
    pub wrong_shared: u64,
    /// "Shared" answered by an inexact strategy for a folio one space maps (allowed).
    pub conservative: u64,
    /// Folios whose counters disagree with the page tables, or have fewer references than
    /// mappings.
    pub counter_errors: u64,
    /// The first problem found, described.
    pub first_error: Option<String>,
}

impl OracleReport {
    /// Everything that is a bug: wrong answers and counter errors.
    pub fn mismatches(&self) -> u64 {
        self.wrong_exclusive + self.wrong_shared + self.counter_errors
    }
}

impl Spaces {
    /// (checks, mismatches) of the per-decision oracle ([`SpaceConfig::oracle`](super::SpaceConfig::oracle)), and the
    /// first mismatch described.
    pub fn oracle_decisions(&self) -> (u64, u64, Option<String>) {
        (
            self.inner.oracle_checks.load(Ordering::Relaxed),
            self.inner.oracle_mismatches.load(Ordering::Relaxed),
            self.inner.oracle_first.lock().clone(),
        )
    }

    /// Scans every page table of the family and reports, per mapped folio, who maps it, what
    /// the tracking answers, and whether its counters agree.
    ///
    /// Context: locks every space in turn while holding the others; no other operation of
    /// the family may run concurrently (it may deadlock or see a torn state otherwise).
    pub fn sharing_snapshot(&self) -> Vec<FolioSharing> {
        let cx = &self.inner;
        let t = cx.config.tracking;
        let s = cx.arena.strategy();
        let mut spaces = cx.live_spaces();
        spaces.sort_by_key(|sp| sp.id.id());
        let guards: Vec<_> = spaces.iter().map(|sp| (sp.id, sp.mm.lock())).collect();
        // pfn → rmap id → mappings
        let mut scan: HashMap<u32, HashMap<u32, (RmapId, u64)>> = HashMap::new();
        for (id, mm) in &guards {
            for_each_mapping(&mm.pt, |pfn| {
                scan.entry(pfn)
                    .or_default()
                    .entry(id.id())
                    .or_insert((*id, 0))
                    .1 += 1;
            });
        }
        let mut out: Vec<FolioSharing> = scan
            .into_iter()
            .map(|(pfn, by)| {
                let folio = cx.folio(pfn);
                let order = folio.order();
                let rmap = cx.rmap(folio);
                let mut mappers: Vec<(RmapId, u64)> = by.into_values().collect();
                mappers.sort_by_key(|(id, _)| id.id());
                let answers = mappers
                    .iter()
                    .map(|(id, _)| rmap.mapped_exclusively(t, order, id))
                    .collect();
                let total: u64 = mappers.iter().map(|m| m.1).sum();
                let refcount = folio.ref_count(s);
                let counter_error = rmap.validate(t, order, &mappers).err().or_else(|| {
                    (u64::from(refcount) < total)
                        .then(|| format!("refcount {refcount} below {total} mappings"))
                });
                FolioSharing {
                    pfn,
                    order,
                    mapcount: rmap.mapcount(),
                    refcount,
                    mappers: mappers.iter().map(|(id, n)| (id.id(), *n)).collect(),
                    answers,
                    counter_error,
                }
            })
            .collect();
        drop(guards);
        out.sort_by_key(|f| f.pfn);
        out
    }

    /// The brute-force oracle: compares every `mapped_exclusively` answer and every counter
    /// with a scan of all page tables ([`Spaces::sharing_snapshot`]).
    ///
    /// Context: as [`Spaces::sharing_snapshot`]: the family must be quiescent.
    pub fn check_oracle(&self) -> OracleReport {
        let exact = self.inner.config.tracking.is_exact();
        let mut r = OracleReport::default();
        let note = |r: &mut OracleReport, msg: String| {
            if r.first_error.is_none() {
                r.first_error = Some(msg);
            }
        };
        for f in self.sharing_snapshot() {
            r.folios += 1;
            if let Some(e) = &f.counter_error {
                r.counter_errors += 1;
                note(&mut r, format!("pfn {} order {}: {e}", f.pfn, f.order));
            }
            let exclusive = f.mappers.len() == 1;
            for (&(id, _), &answer) in f.mappers.iter().zip(&f.answers) {
                r.answers += 1;
                if answer && !exclusive {
                    r.wrong_exclusive += 1;
                    note(
                        &mut r,
                        format!(
                            "pfn {}: space {id} told exclusive, mappers {:?}",
                            f.pfn, f.mappers
                        ),
                    );
                } else if !answer && exclusive {
                    if exact && f.mapcount <= 1 << f.order {
                        r.wrong_shared += 1;
                        note(
                            &mut r,
                            format!(
                                "pfn {}: space {id} told shared, mappers {:?}",
                                f.pfn, f.mappers
                            ),
                        );
                    } else {
                        r.conservative += 1;
                    }
                }
            }
        }
        r
    }
}

/// Calls `f(pfn)` once per mapping in `pt`: once per PTE, once per entire mapping.
fn for_each_mapping(pt: &PageTable, mut f: impl FnMut(u32)) {
    for v in pt.vmas.values() {
        for p in &v.ptes {
            if p.present() && (!p.entire() || p.page() == 0) {
                f(p.pfn());
            }
        }
    }
}

impl SpacesInner {
    /// Oracle mode: checks one copy-on-write decision of space `me` (whose page table `own`
    /// the caller holds locked) about folio `pfn` against a scan of every page table.
    pub(super) fn oracle_decision(&self, own: &Mm, me: &RmapId, pfn: u32, reuse: bool) {
        if !self.config.oracle {
            return;
        }
        let mut counts: HashMap<u32, u64> = HashMap::new();
        let mut tally = |pt: &PageTable, id: u32| {
            for_each_mapping(pt, |p| {
                if p == pfn {
                    *counts.entry(id).or_default() += 1;
                }
            })
        };
        tally(&own.pt, me.id());
        for sp in self.live_spaces() {
            if sp.id.id() != me.id() {
                // Oracle mode serialises the family, so nobody else holds this lock.
                let mm = sp.mm.lock();
                tally(&mm.pt, sp.id.id());
            }
        }
        let folio = self.folio(pfn);
        let total: u64 = counts.values().sum();
        let exclusive = counts.len() == 1 && counts.contains_key(&me.id());
        let refs_ok = u64::from(folio.ref_count(self.arena.strategy())) == total;
        let wrong_reuse = reuse && !(exclusive && refs_ok);
        let missed = !reuse
            && self.config.tracking.is_exact()
            && exclusive
            && refs_ok
            && total <= folio.nr_pages() as u64;
        self.oracle_checks.fetch_add(1, Ordering::Relaxed);
        if wrong_reuse || missed {
            self.oracle_mismatches.fetch_add(1, Ordering::Relaxed);
            self.oracle_first.lock().get_or_insert_with(|| {
                format!(
                    "space {} pfn {pfn}: reuse={reuse}, mappers {counts:?}, refcount {}",
                    me.id(),
                    folio.ref_count(self.arena.strategy())
                )
            });
        }
    }
}
