//! A scenario's figure: the seed's headline as a boost against threads, the measured values,
//! and the panels a scenario's shape calls for, as one self-contained SVG.
//!
//! A figure stacks panels, each with its title, axis labels and legend:
//!
//! 1. **Boost against threads.** Every comparison the report computed on the plotted rows
//!    (candidate against baseline, ratio oriented so that above 0 % is better), one line per
//!    pair, with the seed's published points ([`crate::published`]) overlaid as hollow circles
//!    on a dashed line of the same colour, or as a dashed level where the seed gives no thread
//!    count. This is the seed's own table shape (`#threads | vanilla | patched | boost (%)`)
//!    drawn, and the one to read first. Baselines whose boosts differ in magnitude by more
//!    than [`MAGNITUDE_SPLIT`] get a panel each.
//! 2. **Measured values.** The plotted metric per variant against threads: lines with
//!    min-max whiskers, or grouped bars per thread count when there are more than
//!    [`MAX_LINES`] variants (the `peers` contenders). When one variant would flatten the
//!    others (values spanning more than [`LOG_SPAN`], as the kernel's `mmap` against the
//!    user-space caches, or `pread`'s syscall path against the cache), the axis is log10.
//! 3. **Hit ratio** beside throughput, as grouped bars, when the rows carry one.
//! 4. **Boost by benchmark** for comparisons taken at one thread count across a set of
//!    benchmarks (seed 002's fork/COW actions), with the seed's figures as markers.
//!
//! Axes are made for reading: thread axes tick at integers only (powers of two on a log2 axis
//! once the counts span 16x, as `--threads 1:64:x2` asks); value axes and labels carry human
//! units chosen from the metric's name ([`Unit`]): `M ops/s`, `k pages/s`, `ns`, `µs`, `%`,
//! `MiB`, never `1.00e8`. A boost axis whose ratios span more than [`BOOST_SPAN`] (a COW
//! action eighty times faster beside others a few percent apart) places each boost by the
//! log2 of its ratio, ticks at whole doublings (`0 %`, `+100 %`, `+300 %`), so a halving
//! and a doubling sit equally far from zero and the small ones stay visible.
//!
//! The SVG is written by hand rather than through `plotters`: grouped bars, log axes with
//! chosen ticks, overlaid reference points and per-element classes were each a fight with
//! its chart builder, and the hand-written markup is small, deterministic and
//! machine-checkable. Every element a reader sees carries a class (`panel`, `title`,
//! `x-label`, `y-label`, `x-tick`, `y-tick`, `plot-area`, `series`, `point`, `bar`,
//! `reference`, `legend`), so the tests parse the SVG and check the titles, the ticks and
//! that every value lies inside its plot area, and `report.html` inlines the same markup.

use std::fmt::Write;
use std::path::Path;

use serde_json::{Map, Value};

use super::{Comparison, LabError, LabResult, Report};
use crate::published::{self, Point, Published};

/// Measured values spanning more than this factor go on a log10 axis.
pub const LOG_SPAN: f64 = 20.0;

/// More variants than this are drawn as grouped bars rather than lines.
pub const MAX_LINES: usize = 4;

/// Boosts whose ratios (1 included) span more than this factor go on a log-ratio axis.
pub const BOOST_SPAN: f64 = 8.0;

/// The factor the ratios of `boosts` span, 1 included; 0 if a ratio is not positive (a
/// candidate that did nothing), which no log axis can place.
fn boosts_span(boosts: &[f64]) -> f64 {
    let (mut lo, mut hi) = (1.0f64, 1.0f64);
    for b in boosts.iter().filter(|b| b.is_finite()) {
        let r = 1.0 + b / 100.0;
        if r <= 0.0 {
            return 0.0;
        }
        lo = lo.min(r);
        hi = hi.max(r);
    }
    hi / lo
}

/// A panel's width in SVG user units.
const PANEL_W: f64 = 900.0;
/// A panel's height.
const PANEL_H: f64 = 380.0;
/// The plot area inside a panel: left, top, right, bottom edges.
const AREA: (f64, f64, f64, f64) = (100.0, 44.0, 580.0, 310.0);

/// The colours of the series, in order (the common ten-colour qualitative palette).
const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22",
];

// ----------------------------------------------------------------------------------------
// Units and numbers.

/// How a metric's values read to a person, chosen from the metric's name.
#[derive(Clone, Debug, PartialEq)]
pub enum Unit {
    /// Events per second; the suffix (`ops/s`) follows the scaled number.
    Rate(String),
    /// A time; the factor converts one unit of the metric to nanoseconds.
    Time(f64),
    /// A percentage, already in percent.
    Percent,
    /// A fraction of one, shown in percent (hit ratios).
    Fraction,
    /// A signed boost in percent.
    Boost,
    /// Bytes, shown with binary prefixes.
    Bytes,
    /// A plain quantity, shown with SI prefixes.
    Plain,
}

impl Unit {
    /// The unit of `metric`, from its suffix (`_per_sec`, `_ns`, `_ms`, `_pct`, `_ratio`,
    /// `_bytes`).
    pub fn of(metric: &str) -> Unit {
        if let Some(noun) = metric.strip_suffix("_per_cpu_sec") {
            Unit::Rate(format!("{}/CPU-s", noun.replace('_', " ")))
        } else if let Some(noun) = metric.strip_suffix("_per_sec") {
            Unit::Rate(format!("{}/s", noun.replace('_', " ")))
        } else if metric.ends_with("_ns") {
            Unit::Time(1.0)
        } else if metric.ends_with("_us") {
            Unit::Time(1e3)
        } else if metric.ends_with("_ms") {
            Unit::Time(1e6)
        } else if metric.ends_with("_pct") {
            Unit::Percent
        } else if metric.ends_with("_ratio") {
            Unit::Fraction
        } else if metric.ends_with("_bytes") {
            Unit::Bytes
        } else {
            Unit::Plain
        }
    }

    /// `v` with its unit, three significant digits, never in scientific notation.
    pub fn format(&self, v: f64) -> String {
        if !v.is_finite() {
            return "-".into();
        }
        match self {
            Unit::Rate(suffix) => format!("{} {suffix}", si(v)),
            Unit::Time(ns) => time(v * ns),
            Unit::Percent => format!("{} %", sig3(v)),
            Unit::Fraction => format!("{} %", sig3(v * 100.0)),
            Unit::Boost if v > 0.0 => format!("+{} %", sig3(v)),
            Unit::Boost => format!("{} %", sig3(v)),
            Unit::Bytes => bytes(v),
            Unit::Plain => si(v),
        }
    }
}

/// A metric's name in words, without its unit suffix (`p99_latency_ns` -> `p99 latency`).
pub fn metric_words(metric: &str) -> String {
    let base = if let Some(n) = metric.strip_suffix("_per_cpu_sec") {
        format!("{n} per CPU-second")
    } else if let Some(n) = metric.strip_suffix("_per_sec") {
        format!("{n} per second")
    } else {
        ["_ns", "_us", "_ms", "_bytes"]
            .iter()
            .find_map(|s| metric.strip_suffix(s))
            .unwrap_or(metric)
            .to_string()
    };
    base.replace('_', " ")
}

/// Three significant digits, trailing zeros dropped: `12.3`, `0.25`, `1234`, `-5`.
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let digits = v.abs().log10().floor() as i32;
    let decimals = (2 - digits).clamp(0, 9) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// With an SI prefix: `950`, `12.3 k`, `4.5 M`, `1.2 G` (a trailing space before a unit is
/// the caller's).
pub fn si(v: f64) -> String {
    let a = v.abs();
    let (scale, prefix) = if a >= 1e12 {
        (1e12, " T")
    } else if a >= 1e9 {
        (1e9, " G")
    } else if a >= 1e6 {
        (1e6, " M")
    } else if a >= 1e3 {
        (1e3, " k")
    } else {
        (1.0, "")
    };
    format!("{}{prefix}", sig3(v / scale))
}

/// A time in nanoseconds as `ns`, `µs`, `ms` or `s`.
fn time(ns: f64) -> String {
    let a = ns.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 1e3 {
        format!("{} ns", sig3(ns))
    } else if a < 1e6 {
        format!("{} µs", sig3(ns / 1e3))
    } else if a < 1e9 {
        format!("{} ms", sig3(ns / 1e6))
    } else {
        format!("{} s", sig3(ns / 1e9))
    }
}

/// Bytes with binary prefixes.
fn bytes(b: f64) -> String {
    let a = b.abs();
    let (scale, unit) = if a >= (1u64 << 30) as f64 {
        ((1u64 << 30) as f64, "GiB")
    } else if a >= (1u64 << 20) as f64 {
        ((1u64 << 20) as f64, "MiB")
    } else if a >= 1024.0 {
        (1024.0, "KiB")
    } else {
        (1.0, "B")
    };
    format!("{} {unit}", sig3(b / scale))
}

/// Escapes text for SVG and HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

// ----------------------------------------------------------------------------------------
// Axes.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Scale {
    Linear,
    Log10,
    Log2,
    /// Boosts in percent placed by the log2 of their ratio: +100 % sits as far above 0 as
    /// -50 % below it.
    LogRatio,
}

/// A continuous axis: its domain, scale and ticks.
#[derive(Clone, Debug)]
struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Axis {
    /// Where `v` falls, 0 at `lo` to 1 at `hi`.
    fn frac(&self, v: f64) -> f64 {
        let t = |x: f64| match self.scale {
            Scale::Linear => x,
            Scale::Log10 => x.max(f64::MIN_POSITIVE).log10(),
            Scale::Log2 => x.max(f64::MIN_POSITIVE).log2(),
            Scale::LogRatio => (1.0 + x / 100.0).max(f64::MIN_POSITIVE).log2(),
        };
        let span = t(self.hi) - t(self.lo);
        if span > 0.0 {
            (t(v) - t(self.lo)) / span
        } else {
            0.5
        }
    }

    /// A linear value axis over `values` that includes 0, with 4 to 8 round ticks.
    fn linear(values: impl IntoIterator<Item = f64>) -> Axis {
        let (mut lo, mut hi) = (0.0f64, 0.0f64);
        for v in values.into_iter().filter(|v| v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if hi - lo <= 0.0 {
            hi = lo + 1.0;
        }
        let pad = (hi - lo) * 0.05;
        let (lo, hi) = (if lo < 0.0 { lo - pad } else { lo }, hi + pad);
        let raw = (hi - lo) / 6.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * mag);
        let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
        let n = ((hi - lo) / step).round() as usize;
        let ticks = (0..=n).map(|i| lo + i as f64 * step).collect();
        Axis {
            scale: Scale::Linear,
            lo,
            hi,
            ticks,
        }
    }

    /// A log10 axis over the positive `values`, ticks at decades (and 2x, 5x when the
    /// domain spans two decades or fewer).
    fn log10(values: impl IntoIterator<Item = f64>) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for v in values.into_iter().filter(|v| v.is_finite() && *v > 0.0) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            (lo, hi) = (1.0, 10.0);
        }
        // Half a decade at least below the smallest value, so its bar never sits on the floor.
        let (a, mut b) = ((lo.log10() - 0.5).floor() as i32, hi.log10().ceil() as i32);
        if b <= a {
            b = a + 1;
        }
        let mut ticks = Vec::new();
        for e in a..=b {
            let d = 10f64.powi(e);
            ticks.push(d);
            if b - a <= 2 && e < b {
                ticks.extend([2.0 * d, 5.0 * d]);
            }
        }
        Axis {
            scale: Scale::Log10,
            lo: 10f64.powi(a),
            hi: 10f64.powi(b),
            ticks,
        }
    }

    /// A boost axis placed by log2 of the ratio, ticks at whole doublings and halvings
    /// (`-50 %`, `0 %`, `+100 %`, `+300 %` ...), at most ten of them. `values` are boosts in
    /// percent, each above -100 %.
    fn log_ratio(values: impl IntoIterator<Item = f64>) -> Axis {
        let (mut lo, mut hi) = (0.0f64, 0.0f64);
        for v in values.into_iter().filter(|v| v.is_finite()) {
            let r = (1.0 + v / 100.0).log2();
            lo = lo.min(r);
            hi = hi.max(r);
        }
        let (a, b) = (lo.floor() as i32, hi.ceil().max(lo.floor() + 1.0) as i32);
        let step = ((b - a) as usize).div_ceil(9).max(1);
        let boost = |e: i32| (2f64.powi(e) - 1.0) * 100.0;
        let ticks = (a..=b)
            .filter(|e| (e - a) as usize % step == 0 || *e == 0)
            .map(boost)
            .collect();
        Axis {
            scale: Scale::LogRatio,
            lo: boost(a),
            hi: boost(b),
            ticks,
        }
    }

    /// A thread axis over the thread counts `xs`: integer ticks only; linear, or log2 with
    /// ticks at powers of two once the counts span 16x.
    fn threads(xs: &[usize]) -> Axis {
        let lo = xs.iter().copied().min().unwrap_or(1).max(1) as f64;
        let hi = xs.iter().copied().max().unwrap_or(1).max(1) as f64;
        if hi / lo >= 16.0 {
            let mut ticks: Vec<f64> = (0..63)
                .map(|e| (1u64 << e) as f64)
                .filter(|p| *p >= lo && *p <= hi)
                .collect();
            if ticks.first().is_none_or(|f| f.log2() - lo.log2() >= 0.5) {
                ticks.insert(0, lo);
            }
            if ticks.last().is_none_or(|l| hi.log2() - l.log2() >= 0.5) {
                ticks.push(hi);
            }
            let pad = 2f64.powf(0.35);
            return Axis {
                scale: Scale::Log2,
                lo: lo / pad,
                hi: hi * pad,
                ticks,
            };
        }
        let span = hi - lo;
        let step = [
            1.0, 2.0, 4.0, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
        ]
        .into_iter()
        .find(|s| span / s <= 10.0)
        .unwrap_or(1000.0);
        let mut ticks: Vec<f64> = ((lo / step).ceil() as u64..=(hi / step).floor() as u64)
            .map(|k| k as f64 * step)
            .collect();
        if ticks.first().is_none_or(|f| f - lo >= step / 2.0) {
            ticks.insert(0, lo);
        }
        if ticks.last().is_none_or(|l| hi - l >= step / 2.0) {
            ticks.push(hi);
        }
        ticks.dedup();
        let pad = (step / 2.0).max(span * 0.04);
        Axis {
            scale: Scale::Linear,
            lo: lo - pad,
            hi: hi + pad,
            ticks,
        }
    }
}

// ----------------------------------------------------------------------------------------
// Panels.

/// A point of a line: threads, value, and the min-max whisker when there are runs.
type LinePoint = (usize, f64, Option<(f64, f64)>);

/// One line of a line panel.
#[derive(Clone, Debug)]
struct Series {
    name: String,
    color: usize,
    /// (threads, value, optional min-max whisker).
    points: Vec<LinePoint>,
    /// A seed's published figures rather than a measurement.
    published: bool,
}

/// A seed's figure with no thread count: a dashed level across the plot.
#[derive(Clone, Debug)]
struct Level {
    name: String,
    color: usize,
    value: f64,
}

/// One bar series of a bar panel: a value (or none) per group.
#[derive(Clone, Debug)]
struct Bars {
    name: String,
    color: usize,
    values: Vec<Option<f64>>,
}

#[derive(Clone, Debug)]
enum Body {
    Lines {
        series: Vec<Series>,
        levels: Vec<Level>,
    },
    Bars {
        /// Group labels (thread counts or benchmark names).
        groups: Vec<String>,
        /// Whether the groups are thread counts.
        threads: bool,
        bars: Vec<Bars>,
        /// Published markers: (group, bar series, value).
        markers: Vec<(usize, usize, f64)>,
        /// The legend name of the markers.
        marker_name: String,
    },
}

#[derive(Clone, Debug)]
struct Panel {
    title: String,
    x_label: String,
    y_label: String,
    unit: Unit,
    body: Body,
}

impl Panel {
    /// Whether the x axis names categories (benchmarks) rather than thread counts.
    fn categories(&self) -> bool {
        matches!(self.body, Body::Bars { threads: false, .. })
    }

    /// The panel's height: category names slant below the axis and take more room.
    fn height(&self) -> f64 {
        if self.categories() {
            PANEL_H + 40.0
        } else {
            PANEL_H
        }
    }
}

/// The extra fields of a row or comparison include every field of `filter`.
fn matches(extra: &Map<String, Value>, filter: &Map<String, Value>) -> bool {
    filter.iter().all(|(k, v)| extra.get(k) == Some(v))
}

/// A point's extra fields include every field it names.
fn point_matches(p: &Point, extra: &Map<String, Value>) -> bool {
    p.extra
        .iter()
        .all(|(k, v)| extra.get(*k).and_then(Value::as_str) == Some(*v))
}

/// ` (layout=shared-file)` for a non-empty filter.
fn filter_text(filter: &Map<String, Value>) -> String {
    if filter.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = filter
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().map_or(v.to_string(), str::to_string)))
        .collect();
    format!(" ({})", parts.join(", "))
}

/// One series of comparisons: candidate, baseline, metric, extra fields, the comparisons.
type Group<'a> = (
    String,
    String,
    String,
    Map<String, Value>,
    Vec<&'a Comparison>,
);

/// Comparisons grouped by (candidate, baseline, metric, remaining extra), in report order.
fn comparison_groups<'a>(cs: impl Iterator<Item = &'a Comparison>) -> Vec<Group<'a>> {
    let mut groups: Vec<Group<'a>> = Vec::new();
    for c in cs {
        match groups
            .iter_mut()
            .find(|g| g.0 == c.candidate && g.1 == c.baseline && g.2 == c.metric && g.3 == c.extra)
        {
            Some(g) => g.4.push(c),
            None => groups.push((
                c.candidate.clone(),
                c.baseline.clone(),
                c.metric.clone(),
                c.extra.clone(),
                vec![c],
            )),
        }
    }
    groups
}

/// Panel 1: every comparison on rows matching `filter`, as boost against threads, with the
/// seed's points.
///
/// Comparisons against different baselines share a panel unless their boosts differ in
/// magnitude by more than [`MAGNITUDE_SPLIT`]: `pread`'s locked-bit is a few percent over
/// the CAS loop but fifteen times the kernel's syscall path, and one axis for both would
/// flatten the seed's headline into the zero line.
fn boost_panels(
    report: &Report,
    filter: &Map<String, Value>,
    seed: Option<&Published>,
) -> Vec<Panel> {
    let groups = comparison_groups(
        report
            .comparisons
            .iter()
            .filter(|c| matches(&c.extra, filter) && c.boost_pct.is_finite()),
    );
    let theirs = |g: &Group<'_>| -> Vec<&'static Point> {
        seed.map_or(Vec::new(), |s| {
            s.points
                .iter()
                .filter(|p| {
                    p.candidate == g.0
                        && p.baseline == g.1
                        && p.metric == g.2
                        && point_matches(p, &g.3)
                })
                .collect()
        })
    };
    // Baselines in order of first appearance, each with its largest boost (10 % at least,
    // so noise around zero splits nothing).
    let mut parts: Vec<(String, f64, Vec<Group<'_>>)> = Vec::new();
    for g in groups {
        let mag =
            g.4.iter()
                .map(|c| c.boost_pct.abs())
                .chain(theirs(&g).iter().map(|p| p.boost_pct.abs()))
                .fold(10.0f64, f64::max);
        match parts.iter_mut().find(|p| p.0 == g.1) {
            Some(p) => {
                p.1 = p.1.max(mag);
                p.2.push(g);
            }
            None => parts.push((g.1.clone(), mag, vec![g])),
        }
    }
    let mut panels: Vec<(f64, Vec<String>, Vec<Group<'_>>)> = Vec::new();
    for (base, mag, gs) in parts {
        match panels.last_mut() {
            Some(p) if p.0.max(mag) / p.0.min(mag) <= MAGNITUDE_SPLIT => {
                p.0 = p.0.max(mag);
                p.1.push(base);
                p.2.extend(gs);
            }
            _ => panels.push((mag, vec![base], gs)),
        }
    }
    let split = panels.len() > 1;
    panels
        .into_iter()
        .map(|(_, bases, gs)| {
            let heading = if split {
                format!("boost over {}", bases.join(", "))
            } else {
                "boost of candidate over baseline".to_string()
            };
            boost_panel(report, filter, seed, &gs, &heading, &theirs)
        })
        .collect()
}

/// Boosts against different baselines more than this factor apart get their own panels.
pub const MAGNITUDE_SPLIT: f64 = 5.0;

/// One boost panel over `groups`, titled `heading`; `theirs` finds a group's seed points.
fn boost_panel(
    report: &Report,
    filter: &Map<String, Value>,
    seed: Option<&Published>,
    groups: &[Group<'_>],
    heading: &str,
    theirs: &dyn Fn(&Group<'_>) -> Vec<&'static Point>,
) -> Panel {
    let one_metric = groups.iter().all(|g| g.2 == groups[0].2);
    let mut series = Vec::new();
    let mut levels = Vec::new();
    for (i, (cand, base, metric, extra, cs)) in groups.iter().enumerate() {
        let mut name = format!("{cand} vs {base}");
        if !one_metric {
            let _ = write!(name, ": {}", metric_words(metric));
        }
        let mut extra_rest = extra.clone();
        extra_rest.retain(|k, _| !filter.contains_key(k));
        name += &filter_text(&extra_rest);
        let mut points: Vec<_> = cs.iter().map(|c| (c.threads, c.boost_pct, None)).collect();
        points.sort_by_key(|p| p.0);
        let color = i % PALETTE.len();
        if let Some(seed) = seed {
            let theirs = theirs(&groups[i]);
            let mut at: Vec<_> = theirs
                .iter()
                .filter_map(|p| p.threads.map(|t| (t, p.boost_pct, None)))
                .collect();
            at.sort_by_key(|p| p.0);
            if !at.is_empty() {
                series.push(Series {
                    name: format!("seed, {}: {name}", seed.machine),
                    color,
                    points: at,
                    published: true,
                });
            }
            for p in theirs.iter().filter(|p| p.threads.is_none()) {
                levels.push(Level {
                    name: format!("seed, {} (threads not given): {name}", seed.machine),
                    color,
                    value: p.boost_pct,
                });
            }
        }
        series.push(Series {
            name,
            color,
            points,
            published: false,
        });
    }
    // Measured first in the legend, then the seed's.
    series.sort_by_key(|s| s.published);
    let metric = if one_metric {
        metric_words(&groups[0].2)
    } else {
        "each metric".into()
    };
    Panel {
        title: format!(
            "{}: {heading}, {metric}{}",
            report.scenario,
            filter_text(filter)
        ),
        x_label: "threads".into(),
        y_label: "boost (%), above 0 = better".into(),
        unit: Unit::Boost,
        body: Body::Lines { series, levels },
    }
}

/// Panel 2 (and the hit-ratio panel): `metric` per variant against threads, as lines or
/// grouped bars. `force_bars` asks for bars whatever the spread.
fn values_panel(
    report: &Report,
    metric: &str,
    filter: &Map<String, Value>,
    force_bars: bool,
) -> Option<Panel> {
    // Per variant, in report order: (threads, median, min, max).
    type Runs = Vec<(usize, f64, f64, f64)>;
    let mut variants: Vec<(&str, Runs)> = Vec::new();
    for r in report
        .rows
        .iter()
        .filter(|r| r.metric == metric && matches(&r.extra, filter) && r.median.is_finite())
    {
        let v = match variants.iter_mut().find(|v| v.0 == r.variant) {
            Some(v) => v,
            None => {
                variants.push((r.variant.as_str(), Vec::new()));
                variants.last_mut().expect("just pushed")
            }
        };
        v.1.push((r.threads, r.median, r.min, r.max));
    }
    if variants.is_empty() {
        return None;
    }
    let unit = Unit::of(metric);
    let title = format!(
        "{}: {}{} per variant",
        report.scenario,
        metric_words(metric),
        filter_text(filter)
    );
    let y_label = match unit {
        Unit::Fraction => format!("{} (%)", metric_words(metric)),
        _ => metric_words(metric),
    };
    if force_bars || variants.len() > MAX_LINES {
        let mut threads: Vec<usize> = variants
            .iter()
            .flat_map(|v| v.1.iter().map(|p| p.0))
            .collect();
        threads.sort_unstable();
        threads.dedup();
        let bars = variants
            .iter()
            .enumerate()
            .map(|(i, (name, pts))| Bars {
                name: name.to_string(),
                color: i % PALETTE.len(),
                values: threads
                    .iter()
                    .map(|t| pts.iter().find(|p| p.0 == *t).map(|p| p.1))
                    .collect(),
            })
            .collect();
        return Some(Panel {
            title,
            x_label: "threads".into(),
            y_label,
            unit,
            body: Body::Bars {
                groups: threads.iter().map(usize::to_string).collect(),
                threads: true,
                bars,
                markers: Vec::new(),
                marker_name: String::new(),
            },
        });
    }
    let series = variants
        .into_iter()
        .enumerate()
        .map(|(i, (name, mut pts))| {
            pts.sort_by_key(|p| p.0);
            Series {
                name: name.to_string(),
                color: i % PALETTE.len(),
                points: pts
                    .iter()
                    .map(|p| {
                        (
                            p.0,
                            p.1,
                            Some((p.2, p.3)).filter(|w| w.0.is_finite() && w.1.is_finite()),
                        )
                    })
                    .collect(),
                published: false,
            }
        })
        .collect();
    Some(Panel {
        title,
        x_label: "threads".into(),
        y_label,
        unit,
        body: Body::Lines {
            series,
            levels: Vec::new(),
        },
    })
}

/// Panel 4: comparisons outside `filter` taken at one thread count across three or more
/// values of one extra field (seed 002's benchmarks), as grouped bars of the boost, one
/// group per value, one bar per candidate, with the seed's figures as markers.
fn category_panels(
    report: &Report,
    filter: &Map<String, Value>,
    seed: Option<&Published>,
) -> Vec<Panel> {
    let outside: Vec<&Comparison> = report
        .comparisons
        .iter()
        .filter(|c| !matches(&c.extra, filter) && c.boost_pct.is_finite())
        .collect();
    let mut metrics: Vec<&str> = outside.iter().map(|c| c.metric.as_str()).collect();
    metrics.dedup();
    let mut seen = Vec::new();
    let mut panels = Vec::new();
    for metric in metrics {
        if seen.contains(&metric) {
            continue;
        }
        seen.push(metric);
        let cs: Vec<&Comparison> = outside
            .iter()
            .copied()
            .filter(|c| c.metric == metric)
            .collect();
        let threads = cs[0].threads;
        // The one extra field whose values differ.
        let keys: Vec<&String> = cs[0].extra.keys().collect();
        let Some(key) = keys.iter().find(|k| {
            cs.iter()
                .any(|c| c.extra.get(k.as_str()) != cs[0].extra.get(k.as_str()))
        }) else {
            continue;
        };
        let mut groups: Vec<String> = Vec::new();
        for c in &cs {
            let g = c.extra.get(key.as_str()).map_or("-".to_string(), |v| {
                v.as_str().map_or(v.to_string(), str::to_string)
            });
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        if cs.iter().any(|c| c.threads != threads) || groups.len() < 3 {
            continue;
        }
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for c in &cs {
            if !pairs.contains(&(c.candidate.as_str(), c.baseline.as_str())) {
                pairs.push((c.candidate.as_str(), c.baseline.as_str()));
            }
        }
        let group_of = |c: &Comparison| {
            groups
                .iter()
                .position(|g| c.extra.get(key.as_str()).and_then(Value::as_str) == Some(g.as_str()))
        };
        let bars: Vec<Bars> = pairs
            .iter()
            .enumerate()
            .map(|(i, (cand, base))| {
                let mut values = vec![None; groups.len()];
                for c in cs
                    .iter()
                    .filter(|c| c.candidate == *cand && c.baseline == *base)
                {
                    if let Some(g) = group_of(c) {
                        values[g] = Some(c.boost_pct);
                    }
                }
                Bars {
                    name: format!("{cand} vs {base}"),
                    color: i % PALETTE.len(),
                    values,
                }
            })
            .collect();
        let mut markers = Vec::new();
        if let Some(seed) = seed {
            for p in seed
                .points
                .iter()
                .filter(|p| p.metric == metric && p.threads.is_none_or(|t| t == threads))
            {
                let Some(b) = pairs
                    .iter()
                    .position(|(c, b)| *c == p.candidate && *b == p.baseline)
                else {
                    continue;
                };
                let Some(g) = groups
                    .iter()
                    .position(|g| p.extra.iter().any(|(k, v)| k == key && v == g))
                else {
                    continue;
                };
                markers.push((g, b, p.boost_pct));
            }
        }
        panels.push(Panel {
            title: format!(
                "{}: boost of candidate over baseline, {} at {threads} thread{} by {key}",
                report.scenario,
                metric_words(metric),
                if threads == 1 { "" } else { "s" }
            ),
            x_label: key.to_string(),
            y_label: "boost (%), above 0 = better".into(),
            unit: Unit::Boost,
            body: Body::Bars {
                groups,
                threads: false,
                bars,
                markers,
                marker_name: seed.map_or(String::new(), |s| format!("seed, {}", s.machine)),
            },
        });
    }
    panels
}

// ----------------------------------------------------------------------------------------
// Rendering.

/// A legend entry's swatch.
enum Swatch {
    Line,
    Dashed,
    Hollow,
    Block,
}

fn render_panel(out: &mut String, p: &Panel, y0: f64) {
    let (l, t, r, b) = AREA;
    let (w, h) = (r - l, b - t);
    let kind = match p.body {
        Body::Lines { .. } => "lines",
        Body::Bars { .. } => "bars",
    };
    let _ = writeln!(
        out,
        r#"<g class="panel" data-kind="{kind}" transform="translate(0,{y0})">"#
    );
    let _ = writeln!(
        out,
        r#"<text class="title" x="{}" y="24" font-size="15" font-weight="bold" text-anchor="middle">{}</text>"#,
        PANEL_W / 2.0,
        esc(&p.title)
    );
    let _ = writeln!(
        out,
        r##"<rect class="plot-area" x="{l}" y="{t}" width="{w}" height="{h}" fill="#fcfcfc" stroke="#888"/>"##
    );
    // The value axis: from every value the panel draws.
    let values: Vec<f64> = match &p.body {
        Body::Lines { series, levels } => series
            .iter()
            .flat_map(|s| {
                s.points
                    .iter()
                    .flat_map(|(_, v, wk)| [Some(*v), wk.map(|w| w.0), wk.map(|w| w.1)])
                    .flatten()
            })
            .chain(levels.iter().map(|l| l.value))
            .collect(),
        Body::Bars { bars, markers, .. } => bars
            .iter()
            .flat_map(|b| b.values.iter().flatten().copied())
            .chain(markers.iter().map(|m| m.2))
            .collect(),
    };
    let positive = values
        .iter()
        .filter(|v| **v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
    let y = if p.unit == Unit::Fraction {
        let mut a = Axis::linear([0.0, 1.0]);
        a.hi = 1.0;
        a.ticks.retain(|t| *t <= 1.0 + 1e-9);
        a
    } else if p.unit != Unit::Boost
        && values.iter().all(|v| *v >= 0.0)
        && positive.1 / positive.0 > LOG_SPAN
    {
        Axis::log10(values.iter().copied())
    } else if p.unit == Unit::Boost && boosts_span(&values) > BOOST_SPAN {
        Axis::log_ratio(values.iter().copied())
    } else {
        Axis::linear(values.iter().copied())
    };
    let y_label = match y.scale {
        Scale::Log10 => format!("{} (log scale)", p.y_label),
        Scale::LogRatio => format!("{} (log-ratio scale)", p.y_label),
        _ => p.y_label.clone(),
    };
    let ypos = |v: f64| b - y.frac(v).clamp(0.0, 1.0) * h;
    for tick in &y.ticks {
        let py = ypos(*tick);
        let _ = writeln!(
            out,
            r##"<line class="grid" x1="{l}" x2="{r}" y1="{py:.1}" y2="{py:.1}" stroke="#e3e3e3"/>"##
        );
        let _ = writeln!(
            out,
            r#"<text class="y-tick" x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"#,
            l - 6.0,
            py + 4.0,
            esc(&p.unit.format(*tick))
        );
    }
    if p.unit == Unit::Boost && y.lo < 0.0 && y.hi > 0.0 {
        let py = ypos(0.0);
        let _ = writeln!(
            out,
            r##"<line class="zero" x1="{l}" x2="{r}" y1="{py:.1}" y2="{py:.1}" stroke="#444" stroke-width="1.2"/>"##
        );
    }
    let _ = writeln!(
        out,
        r#"<text class="x-label" x="{}" y="{}" font-size="13" text-anchor="middle">{}</text>"#,
        (l + r) / 2.0,
        if p.categories() { b + 98.0 } else { b + 40.0 },
        esc(&p.x_label)
    );
    let _ = writeln!(
        out,
        r#"<text class="y-label" x="0" y="0" font-size="13" text-anchor="middle" transform="translate(18,{}) rotate(-90)">{}</text>"#,
        (t + b) / 2.0,
        esc(&y_label)
    );
    let mut legend: Vec<(String, usize, Swatch)> = Vec::new();
    match &p.body {
        Body::Lines { series, levels } => {
            let xs: Vec<usize> = series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0))
                .collect();
            let x = Axis::threads(&xs);
            let xpos = |v: usize| l + x.frac(v as f64).clamp(0.0, 1.0) * w;
            for tick in &x.ticks {
                let px = l + x.frac(*tick) * w;
                let _ = writeln!(
                    out,
                    r##"<line class="grid" x1="{px:.1}" x2="{px:.1}" y1="{t}" y2="{b}" stroke="#eeeeee"/>"##
                );
                let _ = writeln!(
                    out,
                    r#"<text class="x-tick" data-axis="threads" x="{px:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
                    b + 16.0,
                    *tick as u64
                );
            }
            for lv in levels {
                let py = ypos(lv.value);
                let c = PALETTE[lv.color];
                let _ = writeln!(
                    out,
                    r#"<line class="reference" data-name="{}" data-value="{}" x1="{l}" x2="{r}" y1="{py:.1}" y2="{py:.1}" stroke="{c}" stroke-width="1.5" stroke-dasharray="2 4"><title>{}: {}</title></line>"#,
                    esc(&lv.name),
                    lv.value,
                    esc(&lv.name),
                    esc(&p.unit.format(lv.value))
                );
                legend.push((lv.name.clone(), lv.color, Swatch::Dashed));
            }
            for s in series {
                let c = PALETTE[s.color];
                let kind = if s.published { "published" } else { "measured" };
                let _ = writeln!(
                    out,
                    r#"<g class="series" data-kind="{kind}" data-name="{}">"#,
                    esc(&s.name)
                );
                let d: Vec<String> = s
                    .points
                    .iter()
                    .enumerate()
                    .map(|(i, pt)| {
                        format!(
                            "{}{:.1} {:.1}",
                            if i == 0 { "M" } else { "L" },
                            xpos(pt.0),
                            ypos(pt.1)
                        )
                    })
                    .collect();
                let dash = if s.published {
                    r#" stroke-dasharray="6 4""#
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    r#"<path class="line" d="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
                    d.join(" ")
                );
                for (tx, v, wk) in &s.points {
                    let (px, py) = (xpos(*tx), ypos(*v));
                    if let Some((lo, hi)) = wk {
                        let _ = writeln!(
                            out,
                            r#"<line class="whisker" x1="{px:.1}" x2="{px:.1}" y1="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="1"/>"#,
                            ypos(*lo),
                            ypos(*hi)
                        );
                    }
                    let (fill, rad) = if s.published { ("white", 5) } else { (c, 3) };
                    let _ = writeln!(
                        out,
                        r#"<circle class="point" data-threads="{tx}" data-value="{v}" cx="{px:.1}" cy="{py:.1}" r="{rad}" fill="{fill}" stroke="{c}" stroke-width="2"><title>{}, {tx} thread{}: {}</title></circle>"#,
                        esc(&s.name),
                        if *tx == 1 { "" } else { "s" },
                        esc(&p.unit.format(*v))
                    );
                }
                let _ = writeln!(out, "</g>");
                let sw = if s.published {
                    Swatch::Hollow
                } else {
                    Swatch::Line
                };
                legend.push((s.name.clone(), s.color, sw));
            }
        }
        Body::Bars {
            groups,
            threads,
            bars,
            markers,
            marker_name,
        } => {
            let gw = w / groups.len() as f64;
            let bw = (gw * 0.8 / bars.len().max(1) as f64).min(60.0);
            let bar_x = |g: usize, i: usize| {
                l + gw * g as f64 + (gw - bw * bars.len() as f64) / 2.0 + bw * i as f64
            };
            let axis = if *threads { "threads" } else { "category" };
            for (g, name) in groups.iter().enumerate() {
                let (px, py) = (l + gw * (g as f64 + 0.5), b + 16.0);
                // Names slant so that long ones do not run into each other.
                let slant = if *threads {
                    r#" text-anchor="middle""#.to_string()
                } else {
                    format!(r#" text-anchor="end" transform="rotate(-30 {px:.1} {py})""#)
                };
                let _ = writeln!(
                    out,
                    r#"<text class="x-tick" data-axis="{axis}" x="{px:.1}" y="{py}" font-size="11"{slant}>{}</text>"#,
                    esc(name)
                );
            }
            let base = if y.scale == Scale::Log10 { y.lo } else { 0.0 };
            for (i, s) in bars.iter().enumerate() {
                let c = PALETTE[s.color];
                let _ = writeln!(
                    out,
                    r#"<g class="series" data-kind="measured" data-name="{}">"#,
                    esc(&s.name)
                );
                for (g, v) in s.values.iter().enumerate() {
                    let Some(v) = v else { continue };
                    let (py, p0) = (ypos(*v), ypos(base));
                    let (top, height) = (py.min(p0), (py - p0).abs());
                    let _ = writeln!(
                        out,
                        r#"<rect class="bar" data-group="{}" data-value="{v}" x="{:.1}" y="{top:.1}" width="{:.1}" height="{height:.1}" fill="{c}"><title>{}, {}{}: {}</title></rect>"#,
                        esc(&groups[g]),
                        bar_x(g, i),
                        bw - 1.0,
                        esc(&s.name),
                        esc(&groups[g]),
                        if *threads { " threads" } else { "" },
                        esc(&p.unit.format(*v))
                    );
                }
                let _ = writeln!(out, "</g>");
                legend.push((s.name.clone(), s.color, Swatch::Block));
            }
            if !markers.is_empty() {
                let _ = writeln!(
                    out,
                    r#"<g class="series" data-kind="published" data-name="{}">"#,
                    esc(marker_name)
                );
                for (g, i, v) in markers {
                    let c = PALETTE[bars[*i].color];
                    let _ = writeln!(
                        out,
                        r#"<circle class="point" data-value="{v}" cx="{:.1}" cy="{:.1}" r="5" fill="white" stroke="{c}" stroke-width="2"><title>{}, {}: {}</title></circle>"#,
                        bar_x(*g, *i) + (bw - 1.0) / 2.0,
                        ypos(*v),
                        esc(marker_name),
                        esc(&groups[*g]),
                        esc(&p.unit.format(*v))
                    );
                }
                let _ = writeln!(out, "</g>");
                legend.push((
                    marker_name.clone(),
                    bars[markers[0].1].color,
                    Swatch::Hollow,
                ));
            }
        }
    }
    let _ = writeln!(out, r#"<g class="legend">"#);
    let mut ly = t + 8.0;
    for (name, color, sw) in &legend {
        let lx = r + 14.0;
        let c = PALETTE[*color];
        let _ = match sw {
            Swatch::Line => writeln!(
                out,
                r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2"/><circle cx="{}" cy="{ly}" r="3" fill="{c}"/>"#,
                lx + 22.0,
                lx + 11.0
            ),
            Swatch::Dashed => writeln!(
                out,
                r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="1.5" stroke-dasharray="2 4"/>"#,
                lx + 22.0
            ),
            Swatch::Hollow => writeln!(
                out,
                r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2" stroke-dasharray="6 4"/><circle cx="{}" cy="{ly}" r="4" fill="white" stroke="{c}" stroke-width="2"/>"#,
                lx + 22.0,
                lx + 11.0
            ),
            Swatch::Block => writeln!(
                out,
                r#"<rect x="{lx}" y="{}" width="22" height="10" fill="{c}"/>"#,
                ly - 5.0
            ),
        };
        let lines = wrap(name, LEGEND_CHARS);
        let _ = write!(
            out,
            r#"<text class="legend-entry" x="{}" y="{}" font-size="11">"#,
            lx + 28.0,
            ly + 4.0
        );
        for (i, line) in lines.iter().enumerate() {
            let dy = if i == 0 { 0 } else { 13 };
            let _ = write!(
                out,
                r#"<tspan x="{}" dy="{dy}">{}</tspan>"#,
                lx + 28.0,
                esc(line)
            );
        }
        let _ = writeln!(out, "</text>");
        ly += 18.0 + 13.0 * (lines.len() - 1) as f64;
    }
    let _ = writeln!(out, "</g>\n</g>");
}

/// The characters a legend line holds beside the plot area.
const LEGEND_CHARS: usize = 42;

/// `s` broken at spaces into lines of at most `width` characters (a longer word stands
/// alone on its line).
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in s.split(' ') {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// The figure of `report` as SVG markup: the boost panel, `metric` per variant over rows
/// whose extra fields include `extra`, the hit ratio beside throughput when the rows carry
/// one, and the by-benchmark boost panels. Errors when no row has `metric`.
pub fn figure(report: &Report, metric: &str, extra: &Map<String, Value>) -> LabResult<String> {
    let seed = published::for_scenario(&report.scenario);
    let values = values_panel(report, metric, extra, false)
        .ok_or_else(|| LabError(format!("nothing to plot for metric {metric}")))?;
    let mut panels = boost_panels(report, extra, seed);
    panels.push(values);
    if metric != "hit_ratio" {
        panels.extend(values_panel(report, "hit_ratio", extra, true));
    }
    panels.extend(category_panels(report, extra, seed));
    let height: f64 = panels.iter().map(Panel::height).sum();
    let titles: Vec<&str> = panels.iter().map(|p| p.title.as_str()).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="figure" width="{PANEL_W}" height="{height}" viewBox="0 0 {PANEL_W} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" role="img">"#
    );
    let _ = writeln!(
        out,
        "<title>{} (seed {}): {}</title>",
        esc(&report.scenario),
        esc(&report.seed),
        esc(&titles.join("; "))
    );
    let _ = writeln!(
        out,
        r#"<rect x="0" y="0" width="{PANEL_W}" height="{height}" fill="white"/>"#
    );
    let mut y0 = 0.0;
    for p in &panels {
        render_panel(&mut out, p, y0);
        y0 += p.height();
    }
    out.push_str("</svg>\n");
    Ok(out)
}

/// Writes [`figure`] of `metric` over rows matching `extra` to `path` as SVG.
pub fn plot(
    report: &Report,
    metric: &str,
    extra: &Map<String, Value>,
    path: &Path,
) -> LabResult<()> {
    let svg = figure(report, metric, extra)?;
    std::fs::write(path, svg).map_err(|e| LabError(format!("writing {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Interleaver;

    #[test]
    fn units_read_as_people_write_them() {
        let ops = Unit::of("ops_per_sec");
        assert_eq!(ops.format(1.0e8), "100 M ops/s");
        assert_eq!(ops.format(12_345.0), "12.3 k ops/s");
        assert_eq!(ops.format(950.0), "950 ops/s");
        assert_eq!(Unit::of("p99_latency_ns").format(2_220.0), "2.22 µs");
        assert_eq!(Unit::of("p50_latency_ns").format(42.0), "42 ns");
        assert_eq!(Unit::of("runtime_ms").format(0.5), "500 µs");
        assert_eq!(Unit::of("hit_ratio").format(0.1284), "12.8 %");
        assert_eq!(Unit::of("dead_pct").format(6.7), "6.7 %");
        assert_eq!(
            Unit::of("rss_growth_bytes").format(3.0 * 1048576.0),
            "3 MiB"
        );
        assert_eq!(Unit::of("ops_per_cpu_sec").format(2e6), "2 M ops/CPU-s");
        assert_eq!(Unit::Boost.format(12.34), "+12.3 %");
        assert_eq!(Unit::Boost.format(-0.5), "-0.5 %");
        assert_eq!(Unit::Boost.format(0.0), "0 %");
        assert_eq!(sig3(0.30000000000000004), "0.3");
        assert_eq!(sig3(-0.0), "0");
        assert_eq!(metric_words("p99_latency_ns"), "p99 latency");
    }

    #[test]
    fn wide_boosts_go_on_a_log_ratio_axis() {
        assert_eq!(boosts_span(&[20.0, -10.0]), 1.2 / 0.9);
        assert_eq!(boosts_span(&[-100.0, 5.0]), 0.0);
        let a = Axis::log_ratio([-30.0, 5.0, 7_900.0]);
        assert_eq!(a.scale, Scale::LogRatio);
        assert_eq!(a.ticks.first(), Some(&-50.0));
        assert!(
            a.ticks.contains(&0.0) && a.ticks.contains(&100.0),
            "{:?}",
            a.ticks
        );
        assert!(a.hi >= 7_900.0 && a.ticks.len() <= 10, "{:?}", a.ticks);
        // Doubling and halving sit equally far from zero.
        let (up, down) = (a.frac(100.0) - a.frac(0.0), a.frac(0.0) - a.frac(-50.0));
        assert!((up - down).abs() < 1e-12);
    }

    #[test]
    fn legends_wrap_at_spaces() {
        assert_eq!(wrap("a bb ccc", 4), vec!["a bb", "ccc"]);
        assert_eq!(
            wrap("seed, 32-vCPU Ice Lake: batched vs single: p99 latency", 42).len(),
            2
        );
        assert_eq!(
            wrap("unbreakable-very-long-name", 5),
            vec!["unbreakable-very-long-name"]
        );
    }

    #[test]
    fn thread_axes_tick_at_integers() {
        let a = Axis::threads(&[1, 2]);
        assert_eq!(a.ticks, vec![1.0, 2.0]);
        assert!(a.lo < 1.0 && a.hi > 2.0);
        let a = Axis::threads(&[1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(a.scale, Scale::Log2);
        assert_eq!(a.ticks, vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]);
        let a = Axis::threads(&[1, 3, 5, 7, 9, 11, 13, 15]);
        assert!(a.ticks.iter().all(|t| t.fract() == 0.0), "{:?}", a.ticks);
        assert!(a.ticks.len() <= 12);
    }

    #[test]
    fn writes_an_svg_with_every_variant() {
        let mut r = Report::new("t", "s.txt", serde_json::json!({}));
        let mut il = Interleaver::new();
        for t in [1, 2, 4] {
            il.add("cas-loop", t, "ops_per_sec", 1e7 * t as f64);
            il.add("locked-bit", t, "ops_per_sec", 1.2e7 * t as f64);
        }
        r.add_rows(&il, &Map::new());
        let dir = std::env::temp_dir().join(format!("foliocache-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.svg");
        plot(&r, "ops_per_sec", &Map::new(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("locked-bit") && svg.contains("cas-loop"));
        assert!(!svg.contains("e7") && svg.contains("M ops/s"));
        assert!(plot(&r, "nope", &Map::new(), &path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
