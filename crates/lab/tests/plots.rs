//! The lab's pictures, checked by parsing them rather than by eye: every figure is well-formed
//! SVG with a title and axis labels, thread axes tick at integers only, no tick label is in
//! scientific notation, each panel draws the series and bars its report holds, and every
//! value lies inside its plot area; `report.html` inlines every figure and every table and
//! points at no external file. The reports are small synthetic ones shaped like the
//! scenarios' (`pread`, `peers`, `cow`, `hash`), so the tests run in milliseconds.

use foliocache_lab::harness::{figure, Interleaver, Report, Table};
use foliocache_lab::summary::{html, write_html, RunInfo};
use roxmltree::{Document, Node};
use serde_json::{json, Map, Value};

fn extra(v: Value) -> Map<String, Value> {
    v.as_object().expect("an object").clone()
}

/// Three runs of each (variant, threads, value), a little apart so whiskers exist.
fn add3(il: &mut Interleaver, variant: &str, threads: usize, metric: &str, v: f64) {
    for k in [0.98, 1.0, 1.03] {
        il.add(variant, threads, metric, v * k);
    }
}

fn seed_shaped_table() -> Table {
    let mut t = Table::new(["#threads", "vanilla", "patched", "boost (%)"]);
    t.row(["1", "8.00 M", "9.50 M", "+99.9"]);
    t.row(["2", "1.500e7", "1.810e7", "+20.7"]);
    t
}

/// `pread`'s shape: the seed's pair (cas-loop, locked-bit), optimistic, and the kernel's
/// syscall path fifteen times slower, at 1, 2 and 4 threads.
fn pread_report() -> Report {
    let mut r = Report::new(
        "pread",
        "000_b7e69cdd1cb63f8c.txt",
        json!({"threads": [1, 2, 4]}),
    );
    let mut il = Interleaver::new();
    for t in [1, 2, 4] {
        let n = t as f64;
        add3(&mut il, "cas-loop", t, "ops_per_sec", 8e6 * n.powf(0.8));
        add3(&mut il, "locked-bit", t, "ops_per_sec", 9.5e6 * n.powf(0.9));
        add3(&mut il, "optimistic", t, "ops_per_sec", 8.4e6 * n.powf(0.7));
        add3(&mut il, "kernel-pread", t, "ops_per_sec", 7e5 * n);
    }
    let none = Map::new();
    r.add_rows(&il, &none);
    for t in [1, 2, 4] {
        r.compare("cas-loop", "locked-bit", t, "ops_per_sec", &none);
        for v in ["cas-loop", "locked-bit", "optimistic"] {
            r.compare("kernel-pread", v, t, "ops_per_sec", &none);
        }
    }
    r.tables
        .push(("pread, the seed's table".into(), seed_shaped_table()));
    r.check("final_count_balanced", 0, true);
    r.plot = Some(("ops_per_sec".into(), none));
    r
}

const PEERS: [&str; 6] = [
    "foliocache",
    "foliocache-pinned",
    "quick_cache",
    "moka",
    "kernel-pread",
    "mmap",
];

/// `peers`' shape: six contenders, the kernel's `mmap` forty times ahead of the others.
fn peers_report() -> Report {
    let mut r = Report::new("peers", "none", json!({}));
    let mut il = Interleaver::new();
    for t in [1, 2, 4] {
        for (i, v) in PEERS.iter().enumerate() {
            let ops = if *v == "mmap" {
                4e7
            } else {
                1e6 * (1.0 + i as f64 * 0.3)
            };
            add3(&mut il, v, t, "ops_per_sec", ops * t as f64);
            let hits = if v.starts_with("kernel") || *v == "mmap" {
                1.0
            } else {
                0.81
            };
            il.add(v, t, "hit_ratio", hits);
            il.add(v, t, "p99_latency_ns", 2_500.0);
        }
    }
    let zipf = extra(json!({"mix": "zipf"}));
    r.add_rows(&il, &zipf);
    for t in [1, 2, 4] {
        for base in ["quick_cache", "moka", "kernel-pread", "mmap"] {
            r.compare(base, "foliocache", t, "ops_per_sec", &zipf);
        }
    }
    r.tables.push((String::new(), seed_shaped_table()));
    r.plot = Some(("ops_per_sec".into(), zipf));
    r
}

const COW_BENCHES: [&str; 8] = [
    "remap",
    "munmap",
    "fork",
    "cow",
    "cow-byte",
    "cow-reuse",
    "cow-reuse-byte",
    "pte-dontneed",
];

/// `cow`'s shape: the seed's actions at one process, by benchmark, then anon-cow throughput
/// against threads (the plotted rows).
fn cow_report() -> Report {
    let mut r = Report::new("cow", "002_c6097cf048dbb657.txt", json!({}));
    for (i, b) in COW_BENCHES.iter().enumerate() {
        let mut il = Interleaver::new();
        for v in ["none", "rmap-id", "mm-owner"] {
            // cow-reuse-byte is eighty times faster: a log-ratio axis.
            let k = match (v, *b) {
                ("none", _) => 1.0,
                (_, "cow-reuse-byte") => 1.0 / 80.0,
                _ => 0.7 + 0.05 * i as f64,
            };
            add3(&mut il, v, 1, "runtime_ms", 12.0 * k);
        }
        let e = extra(json!({ "benchmark": b }));
        r.add_rows(&il, &e);
        r.compare("none", "rmap-id", 1, "runtime_ms", &e);
        r.compare("none", "mm-owner", 1, "runtime_ms", &e);
    }
    let seq = extra(json!({"benchmark": "anon-cow-seq"}));
    let mut il = Interleaver::new();
    for t in [1, 2, 3] {
        for (i, v) in ["none", "rmap-id", "mm-owner"].iter().enumerate() {
            add3(
                &mut il,
                v,
                t,
                "pages_per_sec",
                1.8e6 * t as f64 * (1.0 + 0.1 * i as f64),
            );
        }
    }
    r.add_rows(&il, &seq);
    for t in [1, 2, 3] {
        r.compare("none", "rmap-id", t, "pages_per_sec", &seq);
        r.compare("none", "mm-owner", t, "pages_per_sec", &seq);
    }
    r.plot = Some(("pages_per_sec".into(), seq));
    r
}

/// `hash`'s shape: the seed gives a level (per-CPU 8-10 % below immutable) with no thread
/// count.
fn hash_report() -> Report {
    let mut r = Report::new("hash", "003_5f6e8bad98741a79.txt", json!({}));
    let mut il = Interleaver::new();
    for t in [1, 2] {
        add3(&mut il, "immutable", t, "ops_per_sec", 3e6 * t as f64);
        add3(&mut il, "percpu", t, "ops_per_sec", 2.8e6 * t as f64);
        add3(&mut il, "atomic", t, "ops_per_sec", 1.5e6 * t as f64);
    }
    let auto = extra(json!({"buckets": "auto"}));
    r.add_rows(&il, &auto);
    for t in [1, 2] {
        r.compare("immutable", "percpu", t, "ops_per_sec", &auto);
        r.compare("atomic", "percpu", t, "ops_per_sec", &auto);
    }
    r.plot = Some(("ops_per_sec".into(), auto));
    r
}

fn has_class(n: &Node, class: &str) -> bool {
    n.attribute("class")
        .is_some_and(|c| c.split_whitespace().any(|x| x == class))
}

fn num(n: &Node, attr: &str) -> f64 {
    n.attribute(attr)
        .unwrap_or_else(|| panic!("{} without {attr}", n.tag_name().name()))
        .parse()
        .unwrap_or_else(|e| panic!("{attr} of {}: {e}", n.tag_name().name()))
}

fn text(n: &Node) -> String {
    n.descendants()
        .filter(|d| d.is_text())
        .filter_map(|d| d.text())
        .collect::<String>()
}

/// `1.00e8`, `5E-3`, `2e+06`: a digit, an exponent mark, then a digit or a sign.
fn scientific(s: &str) -> bool {
    let c: Vec<char> = s.chars().collect();
    c.windows(3).any(|w| {
        w[0].is_ascii_digit()
            && (w[1] == 'e' || w[1] == 'E')
            && (w[2].is_ascii_digit() || w[2] == '+' || w[2] == '-')
    })
}

/// What one panel of a figure draws.
#[derive(Debug)]
struct PanelInfo {
    title: String,
    kind: String,
    /// `data-name` of each measured series.
    measured: Vec<String>,
    /// Point counts of each published series.
    published: Vec<usize>,
    bars: usize,
    /// Bar heights as fractions of the plot area's height.
    bar_heights: Vec<f64>,
    thread_ticks: Vec<u64>,
    y_ticks: Vec<String>,
    references: usize,
}

/// Parses a figure and asserts what every figure must satisfy; returns its panels.
fn check_figure(svg: &str) -> Vec<PanelInfo> {
    let doc = Document::parse(svg).unwrap_or_else(|e| panic!("figure is not well-formed: {e}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let title = root
        .children()
        .find(|n| n.has_tag_name("title"))
        .map(|n| text(&n))
        .unwrap_or_default();
    assert!(!title.trim().is_empty(), "figure without a <title>");
    let panels: Vec<Node> = root
        .descendants()
        .filter(|n| n.has_tag_name("g") && has_class(n, "panel"))
        .collect();
    assert!(!panels.is_empty(), "figure without panels");
    panels.iter().map(check_panel).collect()
}

fn check_panel(p: &Node) -> PanelInfo {
    let all =
        |class: &str| -> Vec<Node> { p.descendants().filter(|n| has_class(n, class)).collect() };
    let one_text = |class: &str| -> String {
        let found = all(class);
        assert_eq!(found.len(), 1, "panel needs exactly one {class}");
        let s = text(&found[0]);
        assert!(!s.trim().is_empty(), "empty {class}");
        s
    };
    let title = one_text("title");
    one_text("x-label");
    one_text("y-label");
    let area = all("plot-area");
    assert_eq!(area.len(), 1, "{title}: one plot area");
    let (ax, ay) = (num(&area[0], "x"), num(&area[0], "y"));
    let (aw, ah) = (num(&area[0], "width"), num(&area[0], "height"));
    let eps = 0.06;
    let inside = |x: f64, y: f64, what: &str| {
        assert!(
            x >= ax - eps && x <= ax + aw + eps && y >= ay - eps && y <= ay + ah + eps,
            "{title}: {what} at ({x}, {y}) outside the plot area ({ax}, {ay}, {aw}, {ah})"
        );
    };
    let mut thread_ticks = Vec::new();
    for t in all("x-tick") {
        let s = text(&t);
        assert!(
            !scientific(&s),
            "{title}: x tick {s:?} in scientific notation"
        );
        if t.attribute("data-axis") == Some("threads") {
            let n: u64 = s
                .parse()
                .unwrap_or_else(|_| panic!("{title}: thread tick {s:?} is not an integer"));
            thread_ticks.push(n);
        }
    }
    let y_ticks: Vec<String> = all("y-tick").iter().map(text).collect();
    assert!(y_ticks.len() >= 2, "{title}: at least two y ticks");
    for s in &y_ticks {
        assert!(
            !scientific(s),
            "{title}: y tick {s:?} in scientific notation"
        );
    }
    for c in all("point") {
        inside(num(&c, "cx"), num(&c, "cy"), "a point");
    }
    for l in all("whisker") {
        inside(num(&l, "x1"), num(&l, "y1"), "a whisker");
        inside(num(&l, "x2"), num(&l, "y2"), "a whisker");
    }
    for l in all("reference") {
        inside(num(&l, "x1"), num(&l, "y1"), "a reference level");
        inside(num(&l, "x2"), num(&l, "y2"), "a reference level");
    }
    for path in all("line") {
        let d = path.attribute("d").expect("a path");
        let nums: Vec<f64> = d
            .split(|c: char| c == 'M' || c == 'L' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().expect("a coordinate"))
            .collect();
        for xy in nums.chunks(2) {
            inside(xy[0], xy[1], "a line vertex");
        }
    }
    let bars = all("bar");
    let mut bar_heights = Vec::new();
    for b in &bars {
        let (x, y, w, h) = (num(b, "x"), num(b, "y"), num(b, "width"), num(b, "height"));
        assert!(w > 0.0 && h >= 0.0, "{title}: a bar of size {w} x {h}");
        inside(x, y, "a bar's corner");
        inside(x + w, y + h, "a bar's corner");
        bar_heights.push(h / ah);
    }
    // The legend beside the plot area: one entry per series and level, lines short enough
    // to stay inside the panel.
    let entries = all("legend-entry");
    assert_eq!(
        entries.len(),
        all("series").len() + all("reference").len(),
        "{title}: legend entries"
    );
    for e in &entries {
        for line in e.children().filter(|n| n.has_tag_name("tspan")) {
            let s = text(&line);
            assert!(
                s.chars().count() <= 42 || !s.contains(' '),
                "{title}: legend line {s:?} runs out of the panel"
            );
        }
    }
    let series: Vec<Node> = all("series");
    let measured = series
        .iter()
        .filter(|s| s.attribute("data-kind") == Some("measured"))
        .map(|s| s.attribute("data-name").unwrap_or("").to_string())
        .collect();
    let published = series
        .iter()
        .filter(|s| s.attribute("data-kind") == Some("published"))
        .map(|s| s.descendants().filter(|n| has_class(n, "point")).count())
        .collect();
    PanelInfo {
        kind: p.attribute("data-kind").unwrap_or("").to_string(),
        title,
        measured,
        published,
        bars: bars.len(),
        bar_heights,
        thread_ticks,
        y_ticks,
        references: all("reference").len(),
    }
}

fn figure_of(r: &Report) -> String {
    let (metric, extra) = r.plot.as_ref().expect("a plotted metric");
    figure(r, metric, extra).expect("a figure")
}

#[test]
fn every_figure_is_well_formed_with_titles_labels_and_values_inside() {
    for r in [pread_report(), peers_report(), cow_report(), hash_report()] {
        let panels = check_figure(&figure_of(&r));
        for p in &panels {
            assert!(p.title.starts_with(&r.scenario), "{}", p.title);
            if p.kind == "lines" {
                assert!(!p.thread_ticks.is_empty(), "{}: thread ticks", p.title);
            }
        }
    }
}

#[test]
fn pread_shows_the_seeds_headline_apart_from_the_kernel_with_its_points() {
    let panels = check_figure(&figure_of(&pread_report()));
    // The seed's pair with the seed's ten published points, on its own axis (its boosts
    // are a few percent, the kernel comparisons fifteen-fold).
    let head = &panels[0];
    assert_eq!(head.kind, "lines");
    assert_eq!(head.measured, vec!["locked-bit vs cas-loop"]);
    assert_eq!(head.published, vec![10]);
    assert!(
        head.y_ticks.iter().all(|t| t.ends_with('%')),
        "{:?}",
        head.y_ticks
    );
    // Published points run to 24 threads: a log2 axis with power-of-two ticks.
    assert_eq!(head.thread_ticks, vec![1, 2, 4, 8, 16, 24]);
    let kernel = &panels[1];
    assert_eq!(kernel.measured.len(), 3, "{:?}", kernel.measured);
    assert!(kernel.title.contains("kernel-pread"), "{}", kernel.title);
    let values = &panels[2];
    assert_eq!(values.kind, "lines");
    assert_eq!(values.measured.len(), 4);
    // The kernel's path is fifty times below the cache's best: a log axis.
    for t in ["1 M ops/s", "10 M ops/s"] {
        assert!(
            values.y_ticks.iter().any(|y| y == t),
            "{:?}",
            values.y_ticks
        );
    }
    assert_eq!(values.thread_ticks, vec![1, 2, 3, 4]);
    assert!(
        values.y_ticks.iter().any(|t| t.ends_with("M ops/s")),
        "{:?}",
        values.y_ticks
    );
    assert_eq!(panels.len(), 3);
}

#[test]
fn peers_is_grouped_bars_on_a_log_axis_with_the_hit_ratio_beside() {
    let panels = check_figure(&figure_of(&peers_report()));
    assert_eq!(panels.len(), 3, "boost, throughput, hit ratio");
    assert_eq!(panels[0].measured.len(), 4, "foliocache against each peer");
    let ops = &panels[1];
    assert_eq!(ops.kind, "bars");
    assert_eq!(ops.bars, PEERS.len() * 3);
    assert_eq!(ops.measured.len(), PEERS.len());
    assert_eq!(ops.thread_ticks, vec![1, 2, 4]);
    // mmap runs forty times ahead, yet no contender is flattened into the floor.
    let lowest = ops
        .bar_heights
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    assert!(
        lowest > 0.15,
        "lowest bar at {lowest} of the plot height: {ops:?}"
    );
    assert!(ops.title.contains("ops per second"), "{}", ops.title);
    assert!(
        ops.y_ticks.iter().any(|t| t == "1 M ops/s"),
        "{:?}",
        ops.y_ticks
    );
    let hits = &panels[2];
    assert_eq!(hits.kind, "bars");
    assert!(hits.title.contains("hit ratio"), "{}", hits.title);
    assert_eq!(hits.bars, PEERS.len() * 3);
    assert!(
        hits.y_ticks.iter().all(|t| t.ends_with(" %")),
        "{:?}",
        hits.y_ticks
    );
    assert_eq!(hits.y_ticks.last().map(String::as_str), Some("100 %"));
}

#[test]
fn cow_benchmarks_are_bars_with_the_seeds_figures_as_markers() {
    let panels = check_figure(&figure_of(&cow_report()));
    assert_eq!(panels.len(), 3, "boost, pages per second, by benchmark");
    assert_eq!(
        panels[0].measured,
        vec!["rmap-id vs none", "mm-owner vs none"]
    );
    assert_eq!(panels[1].measured.len(), 3);
    let by = &panels[2];
    assert_eq!(by.kind, "bars");
    assert!(by.title.contains("by benchmark"), "{}", by.title);
    assert_eq!(by.bars, 2 * COW_BENCHES.len());
    assert_eq!(
        by.published,
        vec![COW_BENCHES.len()],
        "one seed figure per benchmark"
    );
    assert!(
        by.thread_ticks.is_empty(),
        "benchmark names are not thread ticks"
    );
    for t in ["0 %", "+100 %", "+300 %"] {
        assert!(by.y_ticks.iter().any(|y| y == t), "{:?}", by.y_ticks);
    }
    // The +25 % to +43 % bars (remap, munmap, fork) stay visible beside the +7900 % one;
    // on a linear axis only cow-reuse-byte's would.
    let visible = by.bar_heights.iter().filter(|h| **h > 0.03).count();
    assert!(
        visible >= 2 * 4,
        "bars taller than 3 %: {:?}",
        by.bar_heights
    );
}

#[test]
fn a_seed_figure_without_threads_is_a_reference_level() {
    let panels = check_figure(&figure_of(&hash_report()));
    // percpu is 7 % below immutable but 87 % above atomic: two boost panels.
    assert_eq!(panels[0].measured, vec!["percpu vs immutable"]);
    assert_eq!(panels[0].references, 1);
    assert!(panels[0].published.is_empty());
    assert_eq!(panels[1].measured, vec!["percpu vs atomic"]);
    assert_eq!(panels[1].references, 0);
}

#[test]
fn one_thread_count_still_gives_a_readable_axis() {
    let mut r = Report::new("lru", "004_cf50064fd6b281c5.txt", json!({}));
    let mut il = Interleaver::new();
    add3(&mut il, "vanilla", 1, "ops_per_sec", 3.1e5);
    add3(&mut il, "filtered", 1, "ops_per_sec", 3.3e5);
    add3(&mut il, "vanilla", 1, "lock_acquisitions_per_folio", 1.02);
    add3(&mut il, "filtered", 1, "lock_acquisitions_per_folio", 0.93);
    let none = Map::new();
    r.add_rows(&il, &none);
    r.compare("vanilla", "filtered", 1, "ops_per_sec", &none);
    r.compare(
        "vanilla",
        "filtered",
        1,
        "lock_acquisitions_per_folio",
        &none,
    );
    r.plot = Some(("ops_per_sec".into(), none));
    let panels = check_figure(&figure_of(&r));
    assert_eq!(panels.len(), 2);
    assert_eq!(
        panels[0].measured.len(),
        2,
        "one series per compared metric"
    );
    for p in &panels {
        assert_eq!(p.thread_ticks, vec![1], "{}", p.title);
    }
    assert!(panels[1].y_ticks.iter().any(|t| t.ends_with("k ops/s")));
}

#[test]
fn report_html_inlines_every_figure_and_every_table() {
    let reports = [
        ("pread", pread_report()),
        ("peers", peers_report()),
        ("cow", cow_report()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let info = RunInfo {
        command: "foliocache-lab all".into(),
        errors: vec![("hash".into(), "boom".into())],
        out: dir.path().to_path_buf(),
        ..RunInfo::default()
    };
    let path = write_html(&reports, &info).unwrap();
    assert_eq!(path, dir.path().join("report.html"));
    let page = std::fs::read_to_string(&path).unwrap();
    assert_eq!(page, html(&reports, &info));
    let doc = Document::parse_with_options(
        &page,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("report.html is not well-formed: {e}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "html");
    let tag = |n: &Node, t: &str| n.tag_name().name() == t;
    assert!(root.descendants().any(|n| tag(&n, "style")), "inline CSS");
    for n in root.descendants() {
        for bad in ["script", "link", "img", "iframe", "object"] {
            assert!(!tag(&n, bad), "report.html must not load a <{bad}>");
        }
        assert!(n.attribute("src").is_none(), "external source in {:?}", n);
        if let Some(href) = n.attribute("href") {
            assert!(href.starts_with('#'), "external link {href}");
        }
    }
    let sections: Vec<Node> = root
        .descendants()
        .filter(|n| tag(n, "section") && has_class(n, "scenario"))
        .collect();
    assert_eq!(sections.len(), reports.len());
    for ((name, r), s) in reports.iter().zip(&sections) {
        assert_eq!(s.attribute("id"), Some(*name));
        let svgs: Vec<Node> = s.descendants().filter(|n| tag(n, "svg")).collect();
        assert_eq!(svgs.len(), 1, "{name}: its figure inline");
        let panels = svgs[0]
            .descendants()
            .filter(|n| tag(n, "g") && has_class(n, "panel"))
            .count();
        assert_eq!(
            panels,
            check_figure(&figure_of(r)).len(),
            "{name}: whole figure"
        );
        let tables = |class: &str| {
            s.descendants()
                .filter(|n| tag(n, "table") && has_class(n, class))
                .count()
        };
        assert_eq!(
            tables("measured"),
            r.tables.len(),
            "{name}: measured tables"
        );
        assert_eq!(tables("comparisons"), 1, "{name}: comparisons table");
        let cells: Vec<String> = s
            .descendants()
            .filter(|n| tag(n, "td"))
            .map(|n| text(&n))
            .collect();
        for c in &cells {
            assert!(!scientific(c), "{name}: cell {c:?} in scientific notation");
        }
        if !r.tables.is_empty() {
            assert!(
                cells.iter().any(|c| c == "18.1 M"),
                "{name}: 1.810e7 as 18.1 M"
            );
        }
        assert_eq!(
            cells.iter().filter(|c| *c == "+99.9").count(),
            r.tables.len(),
            "{name}: the seed-shaped table's cells"
        );
    }
    let contents: Vec<Node> = root
        .descendants()
        .filter(|n| tag(n, "table") && has_class(n, "contents"))
        .collect();
    assert_eq!(contents.len(), 1);
    let rows = contents[0].descendants().filter(|n| tag(n, "tr")).count();
    assert_eq!(
        rows,
        1 + reports.len() + 1,
        "header, each scenario, the error"
    );
    assert!(page.contains("ERROR: boom"));
    assert!(
        page.contains("Pedro Falcato") || page.contains("E5-2690"),
        "published text"
    );
}
