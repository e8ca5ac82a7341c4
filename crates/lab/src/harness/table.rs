//! Human tables, aligned in columns, and the seed's table shape.

use foliocache::Variant;
use serde_json::{Map, Value};

use super::Report;

/// A plain text table.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells print empty).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Renders with `|` separators, numbers right-aligned, the first column left-aligned.
    pub fn render(&self) -> String {
        let ncol = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut width = vec![0usize; ncol];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let cells: Vec<String> = (0..ncol)
                .map(|i| {
                    let c = r.get(i).map_or("", String::as_str);
                    if i == 0 {
                        format!("{c:<w$}", w = width[i])
                    } else {
                        format!("{c:>w$}", w = width[i])
                    }
                })
                .collect();
            let joined = cells.join(" | ");
            joined.trim_end_matches([' ', '|']).to_string()
        };
        let mut out = line(&self.header) + "\n";
        out += &width
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-|-");
        out.push('\n');
        for r in &self.rows {
            out += &line(r);
            out.push('\n');
        }
        out
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

/// Formats a number compactly for tables: `7.31e7` style for large values, 3 significant
/// digits otherwise.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 1e6 {
        format!("{v:.3e}")
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// The variants of a library mechanism in the order of the seed's table: `vanilla`,
/// `patched`, then the others of [`Variant::ALL`] in their order. A variant the library adds
/// joins the lab's loops, comparisons and columns from here without a lab edit.
pub fn seed_order<V: Variant + PartialEq>(vanilla: V, patched: V) -> Vec<V> {
    [vanilla, patched]
        .into_iter()
        .chain(
            V::ALL
                .iter()
                .copied()
                .filter(|v| *v != vanilla && *v != patched),
        )
        .collect()
}

/// The seed's table: `#threads | <baseline> | <patched> | boost (%) | <others...>` for one
/// metric, one line per thread count of the rows `extra` selects, medians. `others` are extra variant columns (e.g.
/// `optimistic`, `kernel-pread`), each followed by nothing (their comparisons live in JSON).
pub fn seed_table(
    report: &Report,
    metric: &str,
    baseline: &str,
    patched: &str,
    others: &[&str],
    extra: &Map<String, Value>,
) -> Table {
    let mut header = vec![
        "#threads".to_string(),
        format!("{baseline} (vanilla)"),
        format!("{patched} (patched)"),
        "boost (%)".to_string(),
    ];
    header.extend(others.iter().map(|s| s.to_string()));
    let mut t = Table::new(header);
    // The thread counts of this metric's rows that `extra` selects (another part of the
    // scenario may run at others).
    let mut threads: Vec<usize> = report
        .rows
        .iter()
        .filter(|r| r.metric == metric && extra.iter().all(|(k, v)| r.extra.get(k) == Some(v)))
        .map(|r| r.threads)
        .collect();
    threads.sort_unstable();
    threads.dedup();
    let lower = super::report::lower_is_better(metric);
    for n in threads {
        let get = |v: &str| report.row(v, n, metric, extra).map(|r| r.median);
        let (b, p) = (get(baseline), get(patched));
        let boost = match (b, p) {
            (Some(b), Some(p)) if b > 0.0 && p > 0.0 => {
                let ratio = if lower { b / p } else { p / b };
                format!("{:+.1}", (ratio - 1.0) * 100.0)
            }
            _ => "-".into(),
        };
        let mut cells = vec![
            n.to_string(),
            b.map_or("-".into(), fmt_num),
            p.map_or("-".into(), fmt_num),
            boost,
        ];
        cells.extend(others.iter().map(|o| get(o).map_or("-".into(), fmt_num)));
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use foliocache::mm::filetable::TableRef;

    use super::*;

    #[test]
    fn seed_order_puts_vanilla_and_patched_first_then_the_rest_of_all() {
        let order = seed_order(TableRef::Atomic, TableRef::Percpu);
        assert_eq!(
            order,
            [
                TableRef::Atomic,
                TableRef::Percpu,
                TableRef::Immutable,
                TableRef::PercpuFast
            ]
        );
        assert_eq!(order.len(), TableRef::ALL.len());
    }

    #[test]
    fn renders_aligned() {
        let mut t = Table::new(["#threads", "a", "b"]);
        t.row(["1", "10", "2000"]);
        t.row(["16", "3"]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "#threads |  a |    b");
        assert_eq!(lines[2], "1        | 10 | 2000");
        assert_eq!(lines[3], "16       |  3");
        assert_eq!(fmt_num(73_100_000.0), "7.310e7");
        assert_eq!(fmt_num(12.345), "12.35");
    }
}
