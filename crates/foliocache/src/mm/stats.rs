//! [`counter_set!`]: a snapshot struct of counters, listed once.
//!
//! Each mechanism's statistics ([`LruStats`](crate::mm::lru::LruStats),
//! [`WorkingsetStats`](crate::mm::lru::WorkingsetStats),
//! [`SpaceStats`](crate::mm::space::SpaceStats)) are plain `u64` fields that tests, tools and
//! the lab read by name, print as `/proc/vmstat` lines and subtract between two snapshots.
//! The macro makes all of that from one list: the struct (fields in the listed order, every
//! field documented), `vmstat()` (`(name, value)` lines in the same order, each name the
//! prefix and the field's; a per-list field as one line per LRU list), `GAUGES` (the names
//! of the lines that are levels, not event counts: what an exporter records as a gauge) and
//! `since(&before)` (the event counts between two snapshots). A new counter is one line.

/// Defines a counter snapshot struct and its `vmstat`, `GAUGES` and `since` (module docs).
///
/// Sections, in this order, each optional but `counters`: `counters` (event counts, `u64`),
/// `per_list` (`[u64; NR_LRU_LISTS]`, one line per LRU list: `_inactive`, `_active`,
/// `_unevictable`), `gauges` (levels, `u64`), `other` (fields of any type that are not
/// counters, left out of `vmstat`).
macro_rules! counter_set {
    (
        $(#[$sm:meta])*
        pub struct $name:ident, prefix $prefix:literal {
            counters { $( $(#[$cm:meta])* $c:ident, )* }
            $( per_list { $( $(#[$lm:meta])* $l:ident, )* } )?
            $( gauges { $( $(#[$gm:meta])* $g:ident, )* } )?
            $( other { $( $(#[$om:meta])* $o:ident: $ot:ty, )* } )?
        }
    ) => {
        $(#[$sm])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct $name {
            $( $( $(#[$om])* pub $o: $ot, )* )?
            $( $(#[$cm])* pub $c: u64, )*
            $( $( $(#[$lm])* pub $l: [u64; $crate::mm::lru::NR_LRU_LISTS], )* )?
            $( $( $(#[$gm])* pub $g: u64, )* )?
        }

        impl $name {
            /// The names of the [`vmstat`](Self::vmstat) lines that are levels, not counts of
            /// events.
            pub const GAUGES: &'static [&'static str] = &[
                $( $(
                    concat!($prefix, stringify!($l), "_inactive"),
                    concat!($prefix, stringify!($l), "_active"),
                    concat!($prefix, stringify!($l), "_unevictable"),
                )* )?
                $( $( concat!($prefix, stringify!($g)), )* )?
            ];

            /// The snapshot as `/proc/vmstat` lines: `(name, value)` pairs in a stable order,
            /// each name the prefix and the field's (a per-list field one line per list,
            /// suffixed `_inactive`, `_active`, `_unevictable`).
            pub fn vmstat(&self) -> Vec<(&'static str, u64)> {
                #[allow(unused_mut)]
                let mut lines = vec![ $( (concat!($prefix, stringify!($c)), self.$c), )* ];
                $( $(
                    let [inactive, active, unevictable] = self.$l;
                    lines.push((concat!($prefix, stringify!($l), "_inactive"), inactive));
                    lines.push((concat!($prefix, stringify!($l), "_active"), active));
                    lines.push((concat!($prefix, stringify!($l), "_unevictable"), unevictable));
                )* )?
                $( $( lines.push((concat!($prefix, stringify!($g)), self.$g)); )* )?
                lines
            }

            /// The events counted since `before`, an earlier snapshot of the same source
            /// (levels and other fields are this snapshot's).
            pub fn since(&self, before: &$name) -> $name {
                $name {
                    $( $c: self.$c.saturating_sub(before.$c), )*
                    ..*self
                }
            }
        }
    };
}
pub(crate) use counter_set;

#[cfg(test)]
mod tests {
    use crate::mm::lru::{LruStats, WorkingsetStats};
    use crate::mm::space::SpaceStats;

    fn check(lines: Vec<(&'static str, u64)>, gauges: &[&str], prefix: &str) {
        let names: std::collections::HashSet<_> = lines.iter().map(|l| l.0).collect();
        assert_eq!(names.len(), lines.len(), "a name twice");
        assert!(lines.iter().all(|l| l.0.starts_with(prefix)));
        assert!(gauges.iter().all(|g| names.contains(g)), "{gauges:?}");
    }

    #[test]
    fn every_counter_set_names_each_line_once_and_lists_its_gauges() {
        let l = LruStats {
            pages: [1, 2, 3],
            reclaimed: 7,
            ..LruStats::default()
        };
        check(l.vmstat(), LruStats::GAUGES, "lru_");
        assert!(l.vmstat().contains(&("lru_pages_active", 2)));
        assert_eq!(LruStats::GAUGES.len(), 7);
        check(
            WorkingsetStats::default().vmstat(),
            WorkingsetStats::GAUGES,
            "workingset_",
        );
        assert_eq!(
            WorkingsetStats::GAUGES,
            ["workingset_nodes", "workingset_cold_target"]
        );
        check(SpaceStats::default().vmstat(), SpaceStats::GAUGES, "");
        assert_eq!(SpaceStats::default().vmstat().len(), 8);
    }

    #[test]
    fn since_subtracts_counts_and_keeps_levels() {
        let before = LruStats {
            scanned: 10,
            batched: 5,
            ..LruStats::default()
        };
        let after = LruStats {
            scanned: 25,
            batched: 3,
            folios: [4, 0, 0],
            ..before
        };
        let d = after.since(&before);
        assert_eq!((d.scanned, d.batched, d.folios), (15, 3, [4, 0, 0]));
    }
}
