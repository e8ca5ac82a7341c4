//! Differential test of the space layer: random sequences of create / anon / write / read /
//! fork / unmap / dontneed / protect / map_folios / drop over several spaces, for every
//! sharer-tracking strategy, against
//!
//! - a byte model of every space (what each address must read back, or which error a
//!   write must hit), and
//! - the brute-force oracle that scans every page table after every step
//!   (`Spaces::check_oracle`, `Spaces::sharing_snapshot`) and, in oracle mode, checks every
//!   copy-on-write decision while it is made.
//!
//! Required: `rmap-id` answers `mapped_exclusively` exactly (mapcount ≤ pages); `mm-owner`
//! exactly for every folio that has never been mapped by more than two spaces at once since
//! it was last unmapped, and never wrongly "exclusive"; every counter agrees with the page
//! tables; no decision reuses a folio another space maps; and once every space is dropped
//! the arena is back to its baseline.
#![cfg(not(loom))]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use foliocache::mm::folio::{Arena, ArenaConfig, FolioRef};
use foliocache::mm::refcount::RefStrategy;
use foliocache::mm::rmap::Tracking;
use foliocache::mm::space::{Space, SpaceConfig, SpaceError, Spaces};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PAGE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Anon,
    File { file: usize, page: usize },
}

struct Model {
    space: Space,
    mapped: BTreeMap<u64, Kind>,
    data: HashMap<u64, Vec<u8>>,
    prot: BTreeSet<u64>,
}

impl Model {
    fn page(&self, vpn: u64, files: &[Vec<u8>]) -> Option<Vec<u8>> {
        match self.mapped.get(&vpn)? {
            Kind::Anon => Some(self.data.get(&vpn).cloned().unwrap_or(vec![0; PAGE])),
            Kind::File { file, page } => {
                Some(files[*file][page * PAGE..(page + 1) * PAGE].to_vec())
            }
        }
    }
}

fn pick_vpn(rng: &mut StdRng, m: &Model) -> Option<u64> {
    if m.mapped.is_empty() {
        return None;
    }
    let i = rng.random_range(0..m.mapped.len());
    m.mapped.keys().nth(i).copied()
}

fn run(t: Tracking, seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ac = ArenaConfig::new(96 << 20, RefStrategy::LockedBit);
    ac.panic_on_bad_page = true;
    let arena = Arc::new(Arena::new(ac).unwrap());
    let mut cfg = SpaceConfig::new(t);
    cfg.oracle = true;
    let sp = Spaces::new(arena.clone(), cfg);
    let baseline = arena.stats().allocated_pages;

    // Two page-cache-like files: uptodate, not anonymous.
    let mut files: Vec<Vec<u8>> = Vec::new();
    let mut file_folios: Vec<Vec<FolioRef<'_>>> = Vec::new();
    for (f, orders) in [[2u32, 0], [3, 1]].iter().enumerate() {
        let mut bytes = Vec::new();
        let mut folios = Vec::new();
        for &o in orders {
            let mut l = arena.alloc(o).unwrap().lock();
            let d = l.data_mut().unwrap();
            for (i, b) in d.iter_mut().enumerate() {
                *b = (i as u8)
                    .wrapping_mul(3)
                    .wrapping_add(f as u8 * 101 + o as u8);
            }
            bytes.extend_from_slice(d);
            l.mark_uptodate();
            folios.push(l.unlock());
        }
        files.push(bytes);
        file_folios.push(folios);
    }

    let mut models: Vec<Model> = Vec::new();
    // pfn -> most spaces that mapped it at once since it was last unmapped everywhere.
    let mut peak: HashMap<u32, usize> = HashMap::new();
    let mut exact_checks = 0u64;

    for step in 0..steps {
        let op = rng.random_range(0..100);
        let ctx = format!("{t} seed {seed} step {step} op {op}");
        if models.is_empty() || (op < 4 && models.len() < 4) {
            models.push(Model {
                space: sp.create().unwrap(),
                mapped: BTreeMap::new(),
                data: HashMap::new(),
                prot: BTreeSet::new(),
            });
            continue;
        }
        let si = rng.random_range(0..models.len());
        match op {
            0..=9 => {
                // anon: small regions of small orders, sometimes a whole PMD.
                let (pages, order) = if rng.random_bool(0.3) {
                    (512, 9)
                } else {
                    (
                        rng.random_range(1..=40),
                        [0u32, 2, 3, 4][rng.random_range(0..4)],
                    )
                };
                let m = &mut models[si];
                let addr = m.space.anon_with_order(pages * PAGE, order).unwrap();
                for v in 0..pages as u64 {
                    m.mapped.insert((addr >> 12) + v, Kind::Anon);
                }
                // Touch it so there are folios to share.
                let len = rng.random_range(1..=pages) * PAGE;
                let fill = rng.random::<u8>();
                m.space.write(addr, &vec![fill; len]).unwrap();
                for v in 0..(len / PAGE) as u64 {
                    m.data.insert((addr >> 12) + v, vec![fill; PAGE]);
                }
            }
            10..=12 => {
                let f = rng.random_range(0..files.len());
                let m = &mut models[si];
                let addr = m.space.map_folios(&file_folios[f]).unwrap();
                for p in 0..files[f].len() / PAGE {
                    m.mapped
                        .insert((addr >> 12) + p as u64, Kind::File { file: f, page: p });
                }
            }
            13..=44 => {
                // write: stop at the first page that must fail, as the space does.
                let m = &mut models[si];
                let Some(vpn) = pick_vpn(&mut rng, m) else {
                    continue;
                };
                let off = rng.random_range(0..PAGE);
                let len = rng.random_range(1..=3 * PAGE);
                let addr = (vpn << 12) + off as u64;
                let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let got = m.space.write(addr, &bytes);
                let mut expect = Ok(());
                let mut done = 0;
                while done < len {
                    let a = addr + done as u64;
                    let v = a >> 12;
                    let o = (a as usize) % PAGE;
                    let n = (PAGE - o).min(len - done);
                    match m.mapped.get(&v) {
                        None => {
                            expect = Err(SpaceError::NotMapped { addr: a });
                            break;
                        }
                        Some(Kind::File { .. }) => {
                            expect = Err(SpaceError::ReadOnly { addr: a });
                            break;
                        }
                        Some(Kind::Anon) if m.prot.contains(&v) => {
                            expect = Err(SpaceError::Protected { addr: a });
                            break;
                        }
                        Some(Kind::Anon) => {
                            let page = m.data.entry(v).or_insert_with(|| vec![0; PAGE]);
                            page[o..o + n].copy_from_slice(&bytes[done..done + n]);
                        }
                    }
                    done += n;
                }
                assert_eq!(got, expect, "{ctx}");
            }
            45..=59 => {
                let m = &models[si];
                let Some(vpn) = pick_vpn(&mut rng, m) else {
                    continue;
                };
                let len = rng.random_range(1..=2 * PAGE);
                let off = rng.random_range(0..PAGE);
                let addr = (vpn << 12) + off as u64;
                let mut buf = vec![0u8; len];
                let got = m.space.read(addr, &mut buf);
                // The model: page by page until an unmapped page.
                let mut want = Vec::new();
                let mut err = None;
                let mut a = addr;
                while want.len() < len {
                    let o = (a as usize) % PAGE;
                    let n = (PAGE - o).min(len - want.len());
                    match m.page(a >> 12, &files) {
                        Some(p) => want.extend_from_slice(&p[o..o + n]),
                        None => {
                            err = Some(SpaceError::NotMapped { addr: a });
                            break;
                        }
                    }
                    a += n as u64;
                }
                match err {
                    Some(e) => assert_eq!(got, Err(e), "{ctx}"),
                    None => {
                        assert_eq!(got, Ok(()), "{ctx}");
                        assert!(buf == want, "{ctx}: bytes differ at {addr:#x}");
                    }
                }
            }
            60..=69 => {
                if models.len() < 5 {
                    let m = &models[si];
                    let child = m.space.fork().unwrap();
                    let copy = Model {
                        space: child,
                        mapped: m.mapped.clone(),
                        data: m.data.clone(),
                        prot: m.prot.clone(),
                    };
                    models.push(copy);
                }
            }
            70..=76 => {
                let m = &mut models[si];
                let Some(vpn) = pick_vpn(&mut rng, m) else {
                    continue;
                };
                let len = if rng.random_bool(0.2) {
                    512
                } else {
                    rng.random_range(1..=8)
                };
                let first = if len == 512 { vpn & !511 } else { vpn };
                m.space.unmap(first << 12, len as usize * PAGE).unwrap();
                for v in first..first + len {
                    m.mapped.remove(&v);
                    m.data.remove(&v);
                    m.prot.remove(&v);
                }
            }
            77..=86 => {
                let m = &mut models[si];
                let Some(vpn) = pick_vpn(&mut rng, m) else {
                    continue;
                };
                let len = rng.random_range(1..=4u64);
                let got = m.space.dontneed(vpn << 12, len as usize * PAGE);
                let file =
                    (vpn..vpn + len).find(|v| matches!(m.mapped.get(v), Some(Kind::File { .. })));
                match file {
                    Some(v) => assert_eq!(
                        got,
                        Err(SpaceError::NotAnonymous { addr: v << 12 }),
                        "{ctx}"
                    ),
                    None => {
                        assert_eq!(got, Ok(()), "{ctx}");
                        for v in vpn..vpn + len {
                            m.data.remove(&v);
                        }
                    }
                }
            }
            87..=95 => {
                let m = &mut models[si];
                let Some(vpn) = pick_vpn(&mut rng, m) else {
                    continue;
                };
                let len = rng.random_range(1..=3u64);
                let ro = rng.random_bool(0.6);
                m.space.protect(vpn << 12, len as usize * PAGE, ro).unwrap();
                for v in vpn..vpn + len {
                    if m.mapped.contains_key(&v) {
                        if ro {
                            m.prot.insert(v);
                        } else {
                            m.prot.remove(&v);
                        }
                    }
                }
            }
            _ => {
                if models.len() > 1 {
                    models.swap_remove(si);
                }
            }
        }

        // The oracle after every step.
        let report = sp.check_oracle();
        assert_eq!(report.mismatches(), 0, "{ctx}: {report:?}");
        let snap = sp.sharing_snapshot();
        let live: std::collections::HashSet<u32> = snap.iter().map(|f| f.pfn).collect();
        peak.retain(|pfn, _| live.contains(pfn));
        for f in &snap {
            let p = peak.entry(f.pfn).or_default();
            *p = (*p).max(f.mappers.len());
            let exclusive = f.mappers.len() == 1;
            for &answer in &f.answers {
                assert!(!answer || exclusive, "{ctx}: wrongly exclusive {f:?}");
                let must_be_exact = match t {
                    Tracking::RmapId { .. } => f.mapcount <= 1 << f.order,
                    // Slots track large folios only; a small folio mapped twice (even by
                    // one space) is "shared" by the mapcount rule, as in the kernel.
                    Tracking::MmOwner => *p <= 2 && (f.order > 0 || f.mapcount <= 1),
                    Tracking::None => false,
                    other => panic!("no exactness rule for the tracking {other}"),
                };
                if must_be_exact {
                    exact_checks += 1;
                    assert_eq!(answer, exclusive, "{ctx}: inexact answer {f:?}");
                }
            }
        }
        let (_, bad, first) = sp.oracle_decisions();
        assert_eq!(bad, 0, "{ctx}: {first:?}");
    }
    let (decisions, _, _) = sp.oracle_decisions();
    let stats = sp.stats();
    drop(models);
    drop(file_folios);
    assert_eq!(sp.live(), 0);
    assert_eq!(arena.stats().allocated_pages, baseline, "{t}: pages leaked");
    assert_eq!(arena.stats().bad_pages, 0);
    if t != Tracking::None {
        assert!(exact_checks > 100, "{t}: only {exact_checks} exact checks");
    }
    assert!(
        decisions > 10,
        "{t}: only {decisions} copy-on-write decisions checked"
    );
    assert!(
        stats.forks > 0 && stats.cow_copies > 0 && stats.pmd_splits > 0,
        "{stats:?}"
    );
}

#[test]
fn random_operations_against_the_model_and_the_oracle() {
    let steps = if cfg!(debug_assertions) { 300 } else { 3000 };
    for t in Tracking::ALL {
        for seed in 0..3 {
            run(t, seed, steps);
        }
    }
}
