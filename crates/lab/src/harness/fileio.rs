//! What the scenarios that read and write real files share: their I/O options
//! ([`IoArgs`]: `--dir`, `--io`, `--direct`), the setup they report ([`IoSetup`]: the file
//! system, the engine the cache got, direct or buffered), and the kernel-side tools of a cold
//! measurement: [`drop_kernel_cache`] (the kernel's copy of a file gone), [`kernel_residency`]
//! (how much of a file the kernel's page cache holds, by `mincore`), [`cpu_time`] (the
//! process's CPU, by `getrusage`) and [`free_bytes`].

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use foliocache::{Config, DirectIo, EngineKind, FolioCache, IoEngine, Variant};
use serde_json::{json, Value};

use super::LabResult;

/// The I/O options of every scenario that reads or writes files (flattened into its
/// options), passed into the [`Config`] of every foliocache contender it builds.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct IoArgs {
    /// Directory for the test files [default: /dev/shm, the tmpfs the seeds measured on;
    /// for `io` and `peers --async`: /var/tmp, a disk file system; for `peers`: the
    /// temporary directory].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// foliocache's I/O engine (`Config::io_engine`): auto, uring, pool or sync.
    #[arg(long = "io", default_value = "auto", value_parser = parse_variant::<IoEngine>)]
    pub engine: IoEngine,
    /// foliocache's direct I/O (`Config::direct_io`): auto (where the file system has it),
    /// on (required) or off (through the kernel's page cache).
    #[arg(long, default_value = "auto", value_parser = parse_variant::<DirectIo>)]
    pub direct: DirectIo,
}

/// Parses a library variant by its stable name (a `value_parser` for any
/// [`Variant`](foliocache::Variant) option).
pub fn parse_variant<V: Variant>(s: &str) -> Result<V, String> {
    V::from_name(s).map_err(|e| e.to_string())
}

impl IoArgs {
    /// `--dir`, or `default` when it is not given.
    pub fn dir_or(&self, default: impl FnOnce() -> PathBuf) -> PathBuf {
        self.dir.clone().unwrap_or_else(default)
    }

    /// `config` with the engine and the direct I/O mode asked for.
    pub fn apply(&self, config: Config) -> Config {
        config.io_engine(self.engine).direct_io(self.direct)
    }
}

/// The I/O a scenario's foliocache contenders got in its directory, for the output's header
/// and the report's `params`.
#[derive(Clone, Debug)]
pub struct IoSetup {
    /// The directory of the files.
    pub dir: PathBuf,
    /// Its file system.
    pub filesystem: Filesystem,
    /// The engine asked for (`--io`).
    pub engine_asked: IoEngine,
    /// The direct I/O mode asked for (`--direct`).
    pub direct_asked: DirectIo,
    /// The engine a cache got ([`FolioCache::io_engine`]).
    pub engine: EngineKind,
    /// The direct-I/O alignment a file in the directory got
    /// ([`CachedFile::direct_io`](foliocache::CachedFile::direct_io)), `None` when buffered.
    pub direct_align: Option<u32>,
    /// Whether a buffered file there is uncached (`RWF_DONTCACHE`,
    /// [`IoMode::Uncached`](foliocache::IoMode::Uncached)).
    pub uncached: bool,
}

impl IoSetup {
    /// Finds out what a cache configured by `args` gets in `dir`: builds a small one, opens a
    /// one-page file there (removed after), and reads its engine and its file's mode. An
    /// error is the one a contender would meet (`--direct on` where the file system has no
    /// direct I/O, `--io uring` where io_uring is not allowed).
    pub fn probe(args: &IoArgs, dir: &Path) -> LabResult<IoSetup> {
        std::fs::create_dir_all(dir)
            .map_err(|e| crate::lab_err!("creating {}: {e}", dir.display()))?;
        let cache = FolioCache::new(args.apply(Config::new(1 << 20)).panic_on_bad_page(false))
            .map_err(|e| crate::lab_err!("foliocache with --io {}: {e}", args.engine))?;
        let probe = tempfile::Builder::new()
            .prefix(".foliocache-lab-io-probe")
            .tempfile_in(dir)
            .map_err(|e| crate::lab_err!("creating a file in {}: {e}", dir.display()))?;
        probe
            .as_file()
            .set_len(4096)
            .map_err(|e| crate::lab_err!("writing {}: {e}", probe.path().display()))?;
        let file = cache.open(probe.path()).map_err(|e| {
            crate::lab_err!(
                "foliocache with --direct {} in {}: {e}",
                args.direct,
                dir.display()
            )
        })?;
        Ok(IoSetup {
            dir: dir.to_path_buf(),
            filesystem: Filesystem::of(dir),
            engine_asked: args.engine,
            direct_asked: args.direct,
            engine: cache.io_engine(),
            direct_align: file.direct_io(),
            uncached: file.io_mode() == foliocache::IoMode::Uncached,
        })
    }

    /// `direct (align N)`, `buffered, uncached` or `buffered`.
    pub fn mode(&self) -> String {
        if self.uncached {
            "buffered, uncached".into()
        } else {
            mode_name(self.direct_align)
        }
    }

    /// The header line: `files in DIR (FS); foliocache I/O: engine E, MODE (asked: --io A
    /// --direct D)`.
    pub fn header(&self) -> String {
        format!(
            "files in {} ({}); foliocache I/O: engine {}, {} (asked: --io {} --direct {})",
            self.dir.display(),
            self.filesystem,
            self.engine,
            self.mode(),
            self.engine_asked,
            self.direct_asked
        )
    }

    /// The report's `params` fields (see `docs/LAB-RESULTS.md`): `dir`, `filesystem`,
    /// `io_engine`, `io_engine_asked`, `io_mode` (`direct`, `uncached` or `buffered`), `direct_io_align`
    /// (`null` when buffered), `direct_io_asked`.
    pub fn params(&self) -> Value {
        json!({
            "dir": self.dir.display().to_string(),
            "filesystem": self.filesystem.name(),
            "io_engine": self.engine.name(),
            "io_engine_asked": self.engine_asked.name(),
            "io_mode": match (self.direct_align, self.uncached) {
                (Some(_), _) => "direct",
                (None, true) => "uncached",
                (None, false) => "buffered",
            },
            "direct_io_align": self.direct_align,
            "direct_io_asked": self.direct_asked.name(),
        })
    }
}

/// `direct (align N)` for a direct-I/O alignment, `buffered` for none.
pub fn mode_name(align: Option<u32>) -> String {
    match align {
        Some(a) => format!("direct (align {a})"),
        None => "buffered".into(),
    }
}

/// Merges the fields of the object `more` into the object `into` (a scenario's `params` and
/// [`IoSetup::params`]); `more`'s values win.
pub fn merge(mut into: Value, more: Value) -> Value {
    if let (Some(map), Value::Object(more)) = (into.as_object_mut(), more) {
        map.extend(more);
    }
    into
}

/// A file system, as `statfs(2)` names it by its magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filesystem {
    /// `f_type`, or `None` if `statfs` failed.
    pub magic: Option<u64>,
}

impl Filesystem {
    /// The file system `path` lives on.
    pub fn of(path: &Path) -> Filesystem {
        Filesystem {
            magic: statfs_magic(path),
        }
    }

    /// `ext4` (also ext2 and ext3, which share its magic), `xfs`, `btrfs`, `tmpfs`, or
    /// `other` (`unknown` if `statfs` failed).
    pub fn name(self) -> &'static str {
        match self.magic {
            None => "unknown",
            Some(m) => fs_name(m),
        }
    }
}

impl std::fmt::Display for Filesystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.name(), self.magic) {
            ("other", Some(m)) => write!(f, "other (statfs type 0x{m:x})"),
            (name, _) => f.write_str(name),
        }
    }
}

/// The name of the file system whose `statfs` magic number is `magic`.
pub fn fs_name(magic: u64) -> &'static str {
    match magic {
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x0102_1994 => "tmpfs",
        _ => "other",
    }
}

/// `statfs(2)`'s `f_type` for `path`.
fn statfs_magic(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path; `st` is a valid out-pointer for one `statfs`.
    if unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // `f_type`'s integer type differs between targets; the magic numbers are 32-bit.
    Some(st.f_type as u64 & 0xffff_ffff)
}

/// Bytes an unprivileged user may still write in `dir`'s file system (`statvfs(2)`).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path; `st` is a valid out-pointer for one `statvfs`.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // `fsblkcnt_t` and `c_ulong` are 32-bit on some targets.
    #[allow(clippy::unnecessary_cast)]
    let (blocks, size) = (st.f_bavail as u64, st.f_frsize as u64);
    Some(blocks.saturating_mul(size))
}

pub use foliocache::io::{drop_kernel_cache, kernel_residency};

/// CPU time this process used so far, every thread included (user + system,
/// `getrusage(RUSAGE_SELF)`).
pub fn cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `ru` is a valid out-pointer for one `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } != 0 {
        return Duration::ZERO;
    }
    // SAFETY: getrusage returned 0, so it filled `ru`.
    let ru = unsafe { ru.assume_init() };
    let tv =
        |t: libc::timeval| Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use std::fs::File;

    #[test]
    fn file_systems_are_named_by_their_magic() {
        assert_eq!(fs_name(0xef53), "ext4");
        assert_eq!(fs_name(0x5846_5342), "xfs");
        assert_eq!(fs_name(0x9123_683e), "btrfs");
        assert_eq!(fs_name(0x0102_1994), "tmpfs");
        assert_eq!(fs_name(0x6969), "other");
        let other = Filesystem {
            magic: Some(0x6969),
        };
        assert_eq!(other.to_string(), "other (statfs type 0x6969)");
        assert_eq!(Filesystem { magic: None }.name(), "unknown");
        if Path::new("/dev/shm").is_dir() {
            assert_eq!(Filesystem::of(Path::new("/dev/shm")).name(), "tmpfs");
        }
        assert!(Filesystem::of(&std::env::temp_dir()).magic.is_some());
        assert_eq!(Filesystem::of(Path::new("/no/such/dir")).name(), "unknown");
    }

    /// A file read through the kernel's page cache is resident; dropped with
    /// `POSIX_FADV_DONTNEED`, it is not (on a file system whose pages can be dropped: not
    /// tmpfs, where they are the file).
    #[test]
    fn residency_follows_reads_and_drops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resident");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        drop(f);
        drop_kernel_cache(&path).unwrap();
        let _ = std::fs::read(&path).unwrap();
        let read = kernel_residency(&path).unwrap();
        assert!(read > 0.99, "a file just read is resident: {read}");
        drop_kernel_cache(&path).unwrap();
        let dropped = kernel_residency(&path).unwrap();
        if Filesystem::of(dir.path()).name() != "tmpfs" {
            assert!(dropped < 0.01, "dropped, still resident: {dropped}");
        }
        let empty = dir.path().join("empty");
        File::create(&empty).unwrap();
        assert_eq!(kernel_residency(&empty).unwrap(), 0.0);
        assert!(kernel_residency(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn cpu_time_advances() {
        let before = cpu_time();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_time() > before);
    }

    #[test]
    fn the_options_reach_the_config_and_the_probe() {
        let args = IoArgs {
            dir: None,
            engine: IoEngine::Sync,
            direct: DirectIo::Off,
        };
        let dir = tempfile::tempdir().unwrap();
        let setup = IoSetup::probe(&args, dir.path()).unwrap();
        let p = setup.params();
        // FOLIOCACHE_DIRECT_IO overrides the configuration (a suite run under each mode).
        if std::env::var_os("FOLIOCACHE_DIRECT_IO").is_none() {
            assert_eq!(setup.direct_align, None, "--direct off is buffered");
            assert_eq!(setup.mode(), "buffered");
            assert_eq!(p["io_mode"], "buffered");
        }
        assert_eq!(p["direct_io_asked"], "off");
        assert_eq!(p["io_engine_asked"], "sync");
        assert!(
            setup.header().contains("--direct off"),
            "{}",
            setup.header()
        );
        assert_eq!(mode_name(Some(512)), "direct (align 512)");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the probe file is gone"
        );
        let merged = merge(json!({ "a": 1, "dir": "x" }), p);
        assert_eq!(merged["a"], 1);
        assert_ne!(merged["dir"], "x");
    }
}
