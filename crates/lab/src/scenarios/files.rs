//! Test files for the page-cache scenarios: created in a chosen directory (tmpfs by default,
//! as the seeds measure), filled with a checkable pattern, removed on drop; and the JSON form
//! of a cache's statistics.

use std::io::Write;
use std::path::{Path, PathBuf};

use foliocache::CacheStats;
use serde_json::{json, Value};

use crate::harness::LabResult;

/// The directory scenarios put their files in unless `--dir` says otherwise: the system's
/// shared-memory tmpfs (`/dev/shm`) when it exists, else the temporary directory.
pub fn default_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The byte at `offset` of test file number `file`: cheap to compute, different on every
/// page and in every file, so a misplaced page or a wrong file is caught.
#[inline]
pub fn pattern(file: u64, offset: u64) -> u8 {
    let page = offset >> 12;
    (offset as u8)
        .wrapping_mul(31)
        .wrapping_add((page as u8).wrapping_mul(17))
        .wrapping_add((page >> 8) as u8)
        .wrapping_add((file as u8).wrapping_mul(101))
}

/// A file filled with [`pattern`], deleted when dropped.
#[derive(Debug)]
pub struct LabFile {
    path: PathBuf,
    /// Which pattern the file holds.
    pub file_no: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl LabFile {
    /// Creates `dir/foliocache-lab-<name>-<pid>` of `size` bytes holding pattern `file_no`.
    pub fn create(dir: &Path, name: &str, file_no: u64, size: u64) -> LabResult<LabFile> {
        std::fs::create_dir_all(dir)
            .map_err(|e| crate::lab_err!("creating {}: {e}", dir.display()))?;
        let path = dir.join(format!("foliocache-lab-{name}-{}", std::process::id()));
        let err = |e: std::io::Error| crate::lab_err!("writing {}: {e}", path.display());
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).map_err(err)?);
        let mut chunk = vec![0u8; 1 << 16];
        let mut off = 0u64;
        while off < size {
            let n = (size - off).min(chunk.len() as u64) as usize;
            for (i, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern(file_no, off + i as u64);
            }
            f.write_all(&chunk[..n]).map_err(err)?;
            off += n as u64;
        }
        f.flush().map_err(err)?;
        Ok(LabFile {
            path,
            file_no,
            size,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The expected bytes at `offset..offset + len` (clamped to the file).
    pub fn expected(&self, offset: u64, len: usize) -> Vec<u8> {
        let end = (offset + len as u64).min(self.size);
        (offset..end).map(|o| pattern(self.file_no, o)).collect()
    }
}

impl Drop for LabFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A cache's statistics as a JSON object (the lab's serialisation of [`CacheStats`]): its
/// `/proc/vmstat` lines ([`CacheStats::vmstat`]), so a counter added to the cache appears here.
pub fn stats_json(s: &CacheStats) -> Value {
    vmstat_json(&s.vmstat())
}

/// Every counter of a cache, read path and LRU ([`foliocache::FolioCache::vmstat`]), as a JSON object.
pub fn cache_stats_json(c: &foliocache::FolioCache) -> Value {
    vmstat_json(&c.vmstat())
}

/// `/proc/vmstat`-style `(name, value)` lines as a JSON object.
pub fn vmstat_json(lines: &[(&str, u64)]) -> Value {
    Value::Object(
        lines
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_hold_their_pattern_and_vanish() {
        let dir = std::env::temp_dir();
        let f = LabFile::create(&dir, "files-test", 3, 70_000).unwrap();
        let data = std::fs::read(f.path()).unwrap();
        assert_eq!(data.len(), 70_000);
        assert_eq!(&data[4000..4200], &f.expected(4000, 200)[..]);
        assert_eq!(f.expected(69_990, 100).len(), 10);
        assert_ne!(pattern(0, 0), pattern(1, 0));
        assert_ne!(pattern(0, 5), pattern(0, 4096 + 5));
        let p = f.path().to_path_buf();
        drop(f);
        assert!(!p.exists());
    }
}
