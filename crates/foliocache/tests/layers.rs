//! The crate's layers hold: every `crate::` and `super::` path of every library file (whole
//! files, inline paths and grouped `use`s included, the trailing test module left out) points
//! down, never up.
//!
//! | unit | may import |
//! |---|---|
//! | `mm::sync`, the root's leaves (`variant`, `trace`) | `mm::sync` |
//! | `io` (and its old name `backing`) | `mm::sync` |
//! | `mm::X` | the `mm` modules of lower layers in the table of `src/mm/mod.rs` (read from the docs, not copied here), `io`, `variant`, `trace` |
//! | `cache` | all of the above |
//!
//! Nothing imports `cache` but the crate root. A path through the root's re-exports
//! (`crate::Variant`, `crate::PAGE_SIZE`) counts as a path to the module it re-exports.
//!
//! And no two files reach each other through such paths (an import circle), a `mod.rs`
//! declaring and re-exporting its own children aside; and no file of `cache/` imports from
//! `cache/mod.rs` (its hub: an item it defines or re-exports), only from the file that
//! defines the item (or through the crate root's re-exports).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source without comments, string and character literals (their text is no path).
fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c[i] == '"' {
            // A raw string `r#"..."#` ends at `"` followed by its hashes; a plain one at an
            // unescaped `"`.
            let mut hashes = 0;
            let mut j = i;
            while j > 0 && c[j - 1] == '#' {
                hashes += 1;
                j -= 1;
            }
            let raw = j > 0 && c[j - 1] == 'r';
            i += 1;
            while i < c.len() {
                if !raw && c[i] == '\\' {
                    i += 2;
                    continue;
                }
                if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c[i] == '\'' && (c.get(i + 2) == Some(&'\'') || c.get(i + 1) == Some(&'\\')) {
            // A character literal (a lifetime has no closing quote two characters on).
            i += 1;
            while i < c.len() && c[i] != '\'' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The source without its trailing test module: a `mod` under `#[cfg(test)]` (or
/// `#[cfg(all(test, ..))]`) whose block ends the file. Test modules elsewhere are kept.
fn without_trailing_tests(src: &str) -> &str {
    let mut at = 0;
    while let Some(k) = src[at..].find("#[cfg(") {
        let start = at + k;
        at = start + 1;
        let attr_end = match src[start..].find(")]") {
            Some(e) => start + e + 2,
            None => break,
        };
        if !src[start..attr_end].contains("test") {
            continue;
        }
        let rest = src[attr_end..].trim_start();
        let rest = rest.strip_prefix("pub(crate) ").unwrap_or(rest);
        if !rest.starts_with("mod ") {
            continue;
        }
        let Some(open) = src[attr_end..].find('{') else {
            continue;
        };
        if src[attr_end..attr_end + open].contains(';') {
            continue; // `mod tests;`: a file of its own
        }
        let mut depth = 0;
        let mut end = None;
        for (i, ch) in src[attr_end + open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(attr_end + open + i + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        if end.is_some_and(|e| src[e..].trim().is_empty()) {
            return &src[..start];
        }
    }
    src
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a path (or a `use` tree) at `c[*i..]`: its expansions, each a list of segments.
fn parse_tree(c: &[char], i: &mut usize) -> Vec<Vec<String>> {
    let skip_ws = |i: &mut usize| {
        while *i < c.len() && c[*i].is_whitespace() {
            *i += 1;
        }
    };
    let mut prefix = Vec::new();
    loop {
        skip_ws(i);
        if *i < c.len() && c[*i] == '{' {
            *i += 1;
            let mut out = Vec::new();
            loop {
                skip_ws(i);
                if *i >= c.len() || c[*i] == '}' {
                    *i += 1;
                    break;
                }
                if c[*i] == ',' {
                    *i += 1;
                    continue;
                }
                let before = *i;
                for tail in parse_tree(c, i) {
                    let mut p = prefix.clone();
                    p.extend(tail.into_iter().filter(|s| s != "self"));
                    out.push(p);
                }
                if *i == before {
                    *i += 1; // not a path: skip a character
                }
                // `as name`
                skip_ws(i);
                if c[*i..].starts_with(&['a', 's']) && c.get(*i + 2).is_some_and(|&n| !is_ident(n))
                {
                    *i += 2;
                    skip_ws(i);
                    while *i < c.len() && is_ident(c[*i]) {
                        *i += 1;
                    }
                }
            }
            return out;
        }
        let start = *i;
        while *i < c.len() && (is_ident(c[*i]) || c[*i] == '*') {
            *i += 1;
        }
        if *i == start {
            break;
        }
        prefix.push(c[start..*i].iter().collect());
        let save = *i;
        skip_ws(i);
        if c[*i..].starts_with(&[':', ':']) {
            *i += 2;
        } else {
            *i = save;
            break;
        }
    }
    vec![prefix]
}

/// Every `crate::` and `super::` path in `src` (comments, literals and the trailing test module
/// left out), resolved against the module path `module` of its file, as absolute segments.
fn paths(src: &str, module: &[String]) -> Vec<Vec<String>> {
    let src = strip(without_trailing_tests(src));
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    // Inline modules (`mod weakened { use super::*; }`) open inside the file: (name, the brace
    // depth outside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut pending: Option<String> = None;
    let mut depth = 0usize;
    let mut i = 0;
    while i < c.len() {
        let starts = |w: &str| c[i..].starts_with(&w.chars().collect::<Vec<_>>());
        let boundary = i == 0 || !(is_ident(c[i - 1]) || c[i - 1] == '$' || c[i - 1] == ':');
        match c[i] {
            '{' => {
                if let Some(name) = pending.take() {
                    inline.push((name, depth));
                }
                depth += 1;
                i += 1;
                continue;
            }
            '}' => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                i += 1;
                continue;
            }
            ';' => pending = None,
            _ => {}
        }
        if boundary && starts("mod ") {
            let mut j = i + 4;
            while j < c.len() && c[j].is_whitespace() {
                j += 1;
            }
            let start = j;
            while j < c.len() && is_ident(c[j]) {
                j += 1;
            }
            pending = Some(c[start..j].iter().collect());
            i = j;
        } else if boundary && (starts("crate::") || starts("super::")) {
            let mut here = module.to_vec();
            here.extend(inline.iter().map(|(n, _)| n.clone()));
            let mut j = i;
            for p in parse_tree(&c, &mut j) {
                let mut base: Vec<String> = Vec::new();
                let mut rest = p.as_slice();
                if rest.first().is_some_and(|s| s == "crate") {
                    rest = &rest[1..];
                } else {
                    base = here.clone();
                    while rest.first().is_some_and(|s| s == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                }
                base.extend(rest.iter().cloned());
                out.push(base);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The layer table of `src/mm/mod.rs` ("# Layers"): module -> layer.
fn mm_layers(mm_docs: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    let section = &mm_docs[mm_docs
        .find("# Layers")
        .expect("mm/mod.rs has a # Layers section")..];
    for line in section.lines() {
        let Some(row) = line.strip_prefix("//! |") else {
            if !out.is_empty() && !line.starts_with("//! |") {
                break;
            }
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Ok(layer) = cells[0].parse::<u32>() else {
            continue;
        };
        for name in cells[1].split('`').skip(1).step_by(2) {
            out.insert(name.to_lowercase(), layer);
        }
    }
    out
}

/// The root's re-exports (`pub use cache::{..}`, `pub use mm::folio::PAGE_SIZE`): item ->
/// the unit it comes from.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for p in paths(&lib.replace("pub use ", "pub use crate::"), &[]) {
        if let Some(item) = p.last() {
            out.insert(
                item.clone(),
                unit_of_path(&p[..p.len() - 1], &BTreeMap::new()),
            );
        }
    }
    out
}

/// The unit an absolute path points into.
fn unit_of_path(p: &[String], reexports: &BTreeMap<String, String>) -> String {
    match p.first().map(String::as_str) {
        None => "root".into(),
        Some("mm") => match p.get(1) {
            Some(m) if m == "Experiment" => "mm::experiment".into(),
            Some(m) => format!("mm::{m}"),
            None => "mm".into(),
        },
        Some("io" | "backing") => "io".into(),
        Some(u @ ("cache" | "variant" | "trace" | "loom_tests")) => u.into(),
        Some(item) => reexports
            .get(item)
            .cloned()
            .unwrap_or_else(|| format!("root::{item}")),
    }
}

/// A library file's unit and module path: `mm/lru/reclaim.rs` is unit `mm::lru`, module
/// `mm::lru::reclaim`.
fn unit_of_file(rel: &Path) -> (String, Vec<String>) {
    let mut module: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if module.last().is_some_and(|s| s == "mod" || s == "lib") {
        module.pop();
    }
    let unit = match module.first().map(String::as_str) {
        None => "root".to_string(),
        Some("mm") => match module.get(1) {
            Some(m) => format!("mm::{m}"),
            None => "mm".into(),
        },
        Some(u) => u.to_string(),
    };
    (unit, module)
}

/// Whether `from` may import `to`.
fn allowed(from: &str, to: &str, layers: &BTreeMap<String, u32>) -> bool {
    if from == to || to == "mm::sync" {
        return true;
    }
    let leaf = |u: &str| matches!(u, "io" | "variant" | "trace");
    match from {
        "root" | "loom_tests" => true,
        // `io` names its choices (`IoEngine`, `DirectIo`) as `Variant`s, a leaf that
        // imports nothing.
        "io" => to == "variant",
        "mm::sync" | "variant" | "trace" => false,
        "mm" => to.starts_with("mm::") || leaf(to),
        "cache" => to.starts_with("mm") || leaf(to),
        m if m.starts_with("mm::") => {
            if leaf(to) {
                return true;
            }
            let (Some(a), Some(b)) = (
                layers.get(&m[4..]),
                to.strip_prefix("mm::").and_then(|t| layers.get(t)),
            ) else {
                return false;
            };
            b < a
        }
        _ => false,
    }
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every path of every library file that the rules forbid, as `file: path (from -> to)`.
fn violations(sources: &[(PathBuf, String)], layers: &BTreeMap<String, u32>) -> Vec<String> {
    let lib = sources
        .iter()
        .find(|(p, _)| p == Path::new("lib.rs"))
        .map(|(_, s)| s.as_str())
        .unwrap_or("");
    let reexports = root_reexports(lib);
    let mut bad = Vec::new();
    for (rel, src) in sources {
        let (from, module) = unit_of_file(rel);
        // Files that are whole test modules (`mm/lru/tests.rs`) are tests, not layers.
        if rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        for p in paths(src, &module) {
            let to = unit_of_path(&p, &reexports);
            if !allowed(&from, &to, layers) {
                bad.push(format!(
                    "{}: crate::{} ({from} -> {to})",
                    rel.display(),
                    p.join("::")
                ));
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

/// The file a path points into: the longest prefix of it that is a file's module.
fn file_of<'a>(p: &[String], modules: &'a BTreeMap<Vec<String>, PathBuf>) -> Option<&'a PathBuf> {
    (0..=p.len()).rev().find_map(|k| modules.get(&p[..k]))
}

/// The sets of two or more files that reach each other through their paths, the edges from a
/// `mod.rs` (or `lib.rs`) to the files below it left out.
fn circles(sources: &[(PathBuf, String)]) -> Vec<BTreeSet<PathBuf>> {
    let modules: BTreeMap<Vec<String>, PathBuf> = sources
        .iter()
        .map(|(rel, _)| (unit_of_file(rel).1, rel.clone()))
        .collect();
    let mut edges: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> = BTreeMap::new();
    for (rel, src) in sources {
        if rel.starts_with("loom_tests") || rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let (_, module) = unit_of_file(rel);
        let hub = rel
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        for p in paths(src, &module) {
            let Some(to) = file_of(&p, &modules) else {
                continue;
            };
            let below = unit_of_file(to).1.starts_with(&module);
            if to != rel && !(hub && below) {
                edges.entry(rel).or_default().insert(to);
            }
        }
    }
    let reach = |from: &PathBuf| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(f) = todo.pop() {
            for &t in edges.get(f).into_iter().flatten() {
                if seen.insert(t) {
                    todo.push(t);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> =
        edges.keys().map(|&f| (f, reach(f))).collect();
    let mut out: Vec<BTreeSet<PathBuf>> = Vec::new();
    for (&f, r) in &reached {
        let circle: BTreeSet<PathBuf> = r
            .iter()
            .filter(|&&t| reached.get(t).is_some_and(|back| back.contains(f)))
            .map(|&t| t.clone())
            .chain(std::iter::once(f.clone()))
            .collect();
        if circle.len() > 1 && !out.contains(&circle) {
            out.push(circle);
        }
    }
    out
}

/// The paths by which a file of `cache/` imports back up from `cache/mod.rs` (anything that
/// file holds, defined there or re-exported), as `file: path`.
fn hub_imports(sources: &[(PathBuf, String)]) -> Vec<String> {
    let modules: BTreeMap<Vec<String>, PathBuf> = sources
        .iter()
        .map(|(rel, _)| (unit_of_file(rel).1, rel.clone()))
        .collect();
    let hub = Path::new("cache/mod.rs");
    let mut bad = Vec::new();
    for (rel, src) in sources {
        if !rel.starts_with("cache") || rel == hub {
            continue;
        }
        let (_, module) = unit_of_file(rel);
        for p in paths(src, &module) {
            // `crate::cache` alone names the module, not an item of its file.
            if p.len() > 1 && file_of(&p, &modules).is_some_and(|f| f == hub) {
                bad.push(format!("{}: crate::{}", rel.display(), p.join("::")));
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn library() -> Vec<(PathBuf, String)> {
    let src = src_dir();
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files
        .into_iter()
        .map(|p| {
            let s = std::fs::read_to_string(&p).unwrap();
            (p.strip_prefix(&src).unwrap().to_path_buf(), s)
        })
        .collect()
}

fn documented_layers() -> BTreeMap<String, u32> {
    mm_layers(&std::fs::read_to_string(src_dir().join("mm/mod.rs")).unwrap())
}

#[test]
fn every_path_points_down_the_layers() {
    let bad = violations(&library(), &documented_layers());
    assert!(bad.is_empty(), "paths up the layers:\n{}", bad.join("\n"));
}

#[test]
fn no_two_files_import_each_other() {
    let found = circles(&library());
    assert!(found.is_empty(), "import circles: {found:?}");
}

#[test]
fn the_checker_sees_an_import_circle() {
    let mut lib = library();
    // `cache/write.rs` imports the handle from `cache/file.rs`; a path back closes a circle.
    let file = lib
        .iter_mut()
        .find(|(p, _)| p == Path::new("cache/file.rs"))
        .unwrap();
    file.1
        .push_str("\nfn back() { super::write::nothing(); }\n");
    let found = circles(&lib);
    assert!(
        found
            .iter()
            .any(|c| c.contains(Path::new("cache/file.rs"))
                && c.contains(Path::new("cache/write.rs"))),
        "{found:?}"
    );
}

#[test]
fn no_file_of_the_cache_imports_from_its_hub() {
    let bad = hub_imports(&library());
    assert!(
        bad.is_empty(),
        "imports back up from cache/mod.rs:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_checker_sees_an_import_from_the_hub() {
    let mut lib = library();
    // A grouped `use` through the hub, and an inline path to a re-export: both go back up.
    let latch = lib
        .iter_mut()
        .find(|(p, _)| p == Path::new("cache/latch.rs"))
        .unwrap();
    latch.1 = format!(
        "use super::{{CacheInner, inode::Inode}};\n{}\nfn up() {{ crate::cache::FolioCache::new(); }}\n",
        latch.1
    );
    let bad = hub_imports(&lib);
    assert_eq!(
        bad,
        [
            "cache/latch.rs: crate::cache::CacheInner",
            "cache/latch.rs: crate::cache::FolioCache::new",
        ],
        "{bad:?}"
    );
}

#[test]
fn the_documented_table_names_every_mechanism_module() {
    let layers = documented_layers();
    let mut on_disk = BTreeSet::new();
    for e in std::fs::read_dir(src_dir().join("mm")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_str().unwrap().to_owned();
        if name != "mod" {
            on_disk.insert(name);
        }
    }
    let documented: BTreeSet<String> = layers.keys().cloned().collect();
    assert_eq!(
        documented, on_disk,
        "the layer table in src/mm/mod.rs and the modules in src/mm differ"
    );
}

#[test]
fn the_checker_reads_inline_grouped_and_relative_paths() {
    let module: Vec<String> = vec!["mm".into(), "lru".into(), "reclaim".into()];
    let src = "use crate::mm::{folio::{Arena, FolioRef}, index::Index as I};\n\
               use super::Lru;\n\
               // crate::cache::CommentsAreNotPaths\n\
               fn f() { let s = \"crate::cache::NorAreStrings\"; crate::cache::CacheInner::f(); }\n\
               #[cfg(test)]\nmod tests {\n    use crate::cache::FolioCache;\n}\n";
    let got: BTreeSet<String> = paths(src, &module).iter().map(|p| p.join("::")).collect();
    let want: BTreeSet<String> = [
        "mm::folio::Arena",
        "mm::folio::FolioRef",
        "mm::index::Index",
        "mm::lru::Lru",
        "cache::CacheInner::f",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(got, want);
}

#[test]
fn the_checker_sees_an_upward_path_in_a_mechanism_file() {
    let layers = documented_layers();
    let mut lib = library();
    let readahead = lib
        .iter_mut()
        .find(|(p, _)| p == Path::new("mm/readahead/fill.rs"))
        .unwrap();
    // An inline path to the cache in the middle of the file, and a use of the LRU, which the
    // table puts in a layer below readahead's: only the first is wrong.
    readahead.1 = readahead.1.replacen(
        "use std::ops::Range;",
        "use std::ops::Range;\nuse crate::mm::lru::Lru;\nfn up() { crate::cache::poke(); }",
        1,
    );
    let bad = violations(&lib, &layers);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("mm::readahead -> cache"), "{bad:?}");
    // And an import from a layer above: `index` may not reach `lru`.
    let index = lib
        .iter_mut()
        .find(|(p, _)| p == Path::new("mm/index/mod.rs"))
        .unwrap();
    index
        .1
        .push_str("\nfn g() { let _ = crate::mm::lru::SWAP_CLUSTER_MAX; }\n");
    let bad = violations(&lib, &layers);
    assert!(
        bad.iter().any(|b| b.contains("mm::index -> mm::lru")),
        "{bad:?}"
    );
}
