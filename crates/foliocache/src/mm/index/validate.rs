//! Statistics and the consistency check of the whole tree.

use super::*;

impl Index {
    /// `mapping->nrpages` and friends: a snapshot of the counters (takes the lock; not counted
    /// as an acquisition).
    pub fn stats(&self) -> IndexStats {
        let g = self.locked.lock();
        let mut s = g.stats;
        s.spare_nodes = g.spare.len() as u64;
        s
    }

    /// Folios in the index with every bit of `flag` set: a self-check helper (the dirty
    /// accounting compares it with its tags). Walks the tree under the lock (not counted as
    /// an acquisition).
    pub fn count_flagged(&self, flag: u64) -> u64 {
        let _g = self.locked.lock();
        let mut n = 0;
        self.first_in_range::<()>(0, u64::MAX, &mut |_, _, _, _, _, e| {
            if let Entry::Folio(pfn) = e {
                if self.arena.folio(pfn).flags() & flag == flag {
                    n += 1;
                }
            }
            None
        });
        n
    }

    /// `xa_dump`-style self-check: walks the whole tree under the lock and checks its
    /// structure and every counter: shifts, parent links and offsets, per-node counts and
    /// value counts, sibling entries, folio alignment, mapping and index, cache references,
    /// pages, folios, nodes, shadow entries, and the shadow-node list (exactly the nodes that
    /// hold only shadows, consistently linked).
    pub fn validate(&self) -> Result<IndexStats, String> {
        let g = self.locked.lock();
        let mut c = IndexStats::default();
        let mut listed = Vec::new();
        let root = self.root.load(Ordering::Relaxed);
        if !root.is_null() {
            // SAFETY: under the index lock.
            let r = unsafe { &*root };
            // SAFETY: under the index lock.
            if !unsafe { r.meta(|m| m.parent) }.is_null() {
                return Err("root has a parent".into());
            }
            self.validate_node(r, 0, &mut c, &mut listed)?;
        }
        let s = g.stats;
        for (name, got, want) in [
            ("nr_pages", c.nr_pages, s.nr_pages),
            ("nr_folios", c.nr_folios, s.nr_folios),
            ("nr_nodes", c.nr_nodes, s.nr_nodes),
            ("nr_shadows", c.nr_shadows, s.nr_shadows),
        ] {
            if got != want {
                return Err(format!("{name}: counted {got}, stats say {want}"));
            }
        }
        if s.pages_inserted - s.pages_removed != s.nr_pages {
            return Err(format!(
                "inserted {} - removed {} != cached {}",
                s.pages_inserted, s.pages_removed, s.nr_pages
            ));
        }
        self.validate_shadow_list(&g, &listed)?;
        let mut out = s;
        out.spare_nodes = g.spare.len() as u64;
        Ok(out)
    }

    pub(super) fn validate_node(
        &self,
        n: &Node,
        base: u128,
        c: &mut IndexStats,
        listed: &mut Vec<*const Node>,
    ) -> Result<(), String> {
        let s = n.shift();
        c.nr_nodes += 1;
        let mut used = 0u32;
        let mut values = 0u32;
        let mut off = 0;
        while off < FANOUT {
            let ibase = base + ((off as u128) << s);
            let w = n.load(off);
            match Entry::decode(w) {
                Entry::Empty => off += 1,
                Entry::Value(_) => {
                    values += 1;
                    used += 1;
                    c.nr_shadows += 1;
                    off += 1;
                }
                Entry::Sibling(canon) => {
                    return Err(format!("orphan sibling at {ibase} -> slot {canon}"));
                }
                Entry::Node(child) => {
                    // SAFETY: under the index lock.
                    let ch = unsafe { &*child };
                    if s < CHUNK_SHIFT || ch.shift() != s - CHUNK_SHIFT {
                        return Err(format!("node at {ibase}: shift {} under {s}", ch.shift()));
                    }
                    // SAFETY: under the index lock.
                    let (parent, poff, count) =
                        unsafe { ch.meta(|m| (m.parent, m.offset as usize, m.count)) };
                    if !std::ptr::eq(parent, n) || poff != off {
                        return Err(format!("node at {ibase}: bad parent link"));
                    }
                    if count == 0 {
                        return Err(format!("empty node left in the tree at {ibase}"));
                    }
                    self.validate_node(ch, ibase, c, listed)?;
                    used += 1;
                    off += 1;
                }
                Entry::Folio(pfn) => {
                    if pfn >= self.arena.nr_pages() {
                        return Err(format!("entry at {ibase}: pfn {pfn} out of the arena"));
                    }
                    let f = self.arena.folio(pfn);
                    let order = f.order();
                    let nr = f.nr_pages() as u64;
                    if Self::target_shift(order) != s {
                        return Err(format!("folio {pfn} of order {order} stored at shift {s}"));
                    }
                    let nslots = 1usize << (order - s);
                    if off % nslots != 0 || off + nslots > FANOUT {
                        return Err(format!("folio {pfn} at slot {off} misaligned"));
                    }
                    for i in 1..nslots {
                        if n.load(off + i) != Entry::sibling(off) {
                            return Err(format!(
                                "folio {pfn}: slot {} is not its sibling",
                                off + i
                            ));
                        }
                    }
                    if f.mapping() != self.id || f.index() as u128 != ibase {
                        return Err(format!(
                            "folio {pfn} at index {ibase} says mapping {} index {}",
                            f.mapping(),
                            f.index()
                        ));
                    }
                    let refs = f.ref_count(self.arena.strategy()) as u64;
                    if refs < nr {
                        return Err(format!("folio {pfn}: {refs} references < {nr} cache refs"));
                    }
                    c.nr_pages += nr;
                    c.nr_folios += 1;
                    used += nslots as u32;
                    off += nslots;
                }
            }
        }
        // SAFETY: under the index lock.
        let count = unsafe { n.meta(|m| m.count) };
        if count != used {
            return Err(format!("node at {base}: count {count}, {used} slots used"));
        }
        Self::validate_shadow_node(n, base, values, listed)
    }
}
