//! The layer table of `foliocache::mm` (its module docs) holds: each mechanism module imports
//! only from the modules below it, and none from the cache above them.

use std::collections::BTreeSet;
use std::path::Path;

/// Each module and what it may import (besides itself): the table in `src/mm/mod.rs`.
const ALLOWED: &[(&str, &[&str])] = &[
    ("sync", &[]),
    ("stats", &["sync"]),
    ("rcu", &["sync"]),
    ("errseq", &["sync"]),
    ("refcount", &["sync", "variant"]),
    ("seqcount", &["sync"]),
    ("percpu_ref", &["sync", "rcu"]),
    ("percpu_counter", &["sync"]),
    ("rmap", &["sync", "seqcount", "variant"]),
    ("filetable", &["sync", "rcu", "percpu_ref", "variant"]),
    ("folio", &["sync", "refcount", "rmap"]),
    ("index", &["sync", "rcu", "refcount", "folio"]),
    ("space", &["sync", "refcount", "rmap", "folio", "stats"]),
    ("filemap", &["sync", "io", "errseq", "index", "folio"]),
    (
        "lru",
        &[
            "sync", "refcount", "folio", "index", "stats", "trace", "variant",
        ],
    ),
    (
        "writeback",
        &["sync", "folio", "index", "io", "errseq", "filemap", "variant"],
    ),
    (
        "readahead",
        &["sync", "folio", "index", "io", "filemap", "lru", "variant"],
    ),
    ("experiment", &["refcount", "readahead", "filetable", "lru"]),
];

/// The modules a file's `use crate::...` lines name, outside its test module.
fn imports(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in src.lines() {
        let l = line.trim_start();
        if l.starts_with("mod tests") || l.starts_with("#[cfg(test)]") {
            break;
        }
        let Some(rest) = l
            .strip_prefix("use crate::")
            .or_else(|| l.strip_prefix("pub use crate::"))
            .or_else(|| l.strip_prefix("pub(crate) use crate::"))
        else {
            continue;
        };
        let rest = rest.strip_prefix("mm::").unwrap_or(rest);
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        out.insert(name);
    }
    out
}

fn files(path: &Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            files(&e.unwrap().path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs")
        && path.file_name().is_some_and(|n| n != "tests.rs")
    {
        out.push(path.to_path_buf());
    }
}

#[test]
fn mechanism_modules_import_only_from_below() {
    let mm = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/mm");
    let mut bad = Vec::new();
    for &(module, allowed) in ALLOWED {
        let dir = mm.join(module);
        let mut paths = Vec::new();
        if dir.is_dir() {
            files(&dir, &mut paths);
        } else {
            paths.push(mm.join(format!("{module}.rs")));
        }
        for p in paths {
            let src = std::fs::read_to_string(&p).unwrap();
            for name in imports(&src) {
                if name != module && !allowed.contains(&name.as_str()) {
                    bad.push(format!("{}: imports crate::{name}", p.display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "imports up the layers:\n{}", bad.join("\n"));
}

#[test]
fn every_mechanism_module_is_in_the_table() {
    let mm = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/mm");
    for e in std::fs::read_dir(&mm).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_str().unwrap().to_owned();
        if name == "mod" {
            continue;
        }
        assert!(
            ALLOWED.iter().any(|&(m, _)| m == name),
            "src/mm/{name} is not in the layer table"
        );
    }
}

#[test]
fn the_checker_sees_an_import_up_the_layers() {
    let src =
        "use crate::mm::sync::Arc;\nuse crate::cache::CacheInner;\n#[cfg(test)]\nuse crate::x;";
    let got = imports(src);
    assert!(got.contains("cache") && got.contains("sync") && !got.contains("x"));
}
