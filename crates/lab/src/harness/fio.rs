//! fio beside a cold measurement: the device's limit for the same file, pattern and queue
//! depth. The options that choose it ([`FioArgs`]: `--fio PATH`, `--no-fio`), a run of it
//! in the shape a scenario asks for ([`FioJob::run`]: `--direct=1`, `io_uring`, else
//! `libaio`, else `psync`), and what its `--output-format=json` says ([`FioOut`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::{drop_kernel_cache, kernel_residency, LabResult};

/// The options of a scenario that runs fio beside its figures (flattened into its options).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct FioArgs {
    /// The fio to run beside the contenders [default: `fio` on PATH, if there is one].
    #[arg(long, value_name = "PATH")]
    pub fio: Option<PathBuf>,
    /// Do not run fio.
    #[arg(long, conflicts_with = "fio")]
    pub no_fio: bool,
}

impl FioArgs {
    /// The fio to run: `--fio PATH` (which must exist), else `fio` on `PATH`, else none;
    /// `--no-fio`: none.
    pub fn find(&self) -> LabResult<Option<PathBuf>> {
        if self.no_fio {
            return Ok(None);
        }
        if let Some(p) = &self.fio {
            if !p.is_file() {
                return Err(crate::lab_err!(
                    "--fio {}: no such file (or pass --no-fio)",
                    p.display()
                ));
            }
            return Ok(Some(p.clone()));
        }
        Ok(std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("fio"))
                .find(|p| is_executable(p))
        }))
    }

    /// The header line saying where the device's limit comes from (`scenario: ...`), for
    /// the fio [`FioArgs::find`] found (`fio`) and the `shape` of its runs in words.
    pub fn header(&self, scenario: &str, fio: Option<&Path>, shape: &str) -> String {
        match fio {
            Some(p) => format!(
                "{scenario}: device limit: {} --direct=1 (io_uring, else libaio, else psync), \
                 {shape}",
                p.display()
            ),
            None if self.no_fio => format!("{scenario}: fio not run (--no-fio): no device limit"),
            None => format!(
                "{scenario}: fio is not on PATH: no device limit measured (--fio PATH names one)"
            ),
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What fio measured.
#[derive(Debug)]
pub struct FioOut {
    /// The `--ioengine` that ran.
    pub engine: String,
    /// Bytes per second read (`bw_bytes`).
    pub bw_bytes: f64,
    /// I/Os per second (`iops`).
    pub iops: f64,
    /// Median completion latency of an I/O.
    pub p50_ns: Option<f64>,
    /// 99th percentile completion latency of an I/O.
    pub p99_ns: Option<f64>,
    /// The fraction of the file in the kernel's page cache after the run.
    pub resident: f64,
}

/// fio's engines, the first one that runs wins.
pub const FIO_ENGINES: [&str; 3] = ["io_uring", "libaio", "psync"];

/// One fio run: `--direct=1 --readonly` reads of `path` in one shape, every job's figures
/// summed (`--group_reporting`).
#[derive(Clone, Debug)]
pub struct FioJob<'a> {
    /// Its `--name` (shows in fio's messages).
    pub name: &'a str,
    /// The file read.
    pub path: &'a Path,
    /// `--rw`: `read`, `randread` ...
    pub rw: &'a str,
    /// `--bs`: `4k`, `128k` ...
    pub bs: String,
    /// `--iodepth`, per job.
    pub depth: usize,
    /// `--numjobs`.
    pub jobs: usize,
    /// `--size`: the bytes of the file read.
    pub size: u64,
    /// `--runtime`: the longest it runs.
    pub runtime: Duration,
    /// `--time_based`: run for the whole `runtime` (wrapping around the file), not until
    /// `size` or `number_ios` is done.
    pub time_based: bool,
    /// `--number_ios`: I/Os per job, when the run is a count of them.
    pub number_ios: Option<u64>,
}

impl FioJob<'_> {
    /// Runs fio `bin` in this shape, the kernel's copy of the file dropped first, trying each
    /// of [`FIO_ENGINES`] until one runs.
    pub fn run(&self, bin: &Path) -> Result<FioOut, String> {
        let mut failures = Vec::new();
        for engine in FIO_ENGINES {
            drop_kernel_cache(self.path)
                .map_err(|e| format!("dropping the kernel's cache: {e}"))?;
            let mut cmd = Command::new(bin);
            cmd.arg(format!("--name={}", self.name))
                .arg(format!("--filename={}", self.path.display()))
                .arg("--readonly")
                .arg("--direct=1")
                .arg(format!("--ioengine={engine}"))
                .arg(format!("--rw={}", self.rw))
                .arg(format!("--bs={}", self.bs))
                .arg(format!("--iodepth={}", self.depth.max(1)))
                .arg(format!("--numjobs={}", self.jobs.max(1)))
                .arg("--group_reporting")
                .arg(format!("--size={}", self.size))
                .arg(format!("--runtime={}ms", self.runtime.as_millis().max(1)))
                .arg("--output-format=json");
            if self.time_based {
                cmd.arg("--time_based");
            }
            if let Some(n) = self.number_ios {
                cmd.arg(format!("--number_ios={}", n.max(1)));
            }
            let out = match cmd.output() {
                Ok(o) => o,
                Err(e) => return Err(format!("running {}: {e}", bin.display())),
            };
            let stdout = String::from_utf8_lossy(&out.stdout);
            let parsed = if out.status.success() {
                parse_fio(&stdout)
            } else {
                let stderr = String::from_utf8_lossy(&out.stderr);
                Err(format!(
                    "{}: {}",
                    out.status,
                    stderr.lines().next().unwrap_or("no message")
                ))
            };
            match parsed {
                Ok(mut f) => {
                    f.engine = engine.to_string();
                    f.resident = kernel_residency(self.path).unwrap_or(f64::NAN);
                    return Ok(f);
                }
                Err(e) => failures.push(format!("{engine}: {e}")),
            }
        }
        Err(failures.join("; "))
    }
}

/// Reads fio's `--output-format=json` (its first job, `--group_reporting`'s sum of them).
pub fn parse_fio(stdout: &str) -> Result<FioOut, String> {
    let start = stdout.find('{').ok_or("no JSON in fio's output")?;
    let v: Value =
        serde_json::from_str(&stdout[start..]).map_err(|e| format!("fio's JSON: {e}"))?;
    let job = &v["jobs"][0];
    match job["error"].as_i64() {
        Some(0) => {}
        Some(e) => return Err(format!("fio's job failed with error {e}")),
        None => return Err("fio's JSON has no job".into()),
    }
    let r = &job["read"];
    let bytes = r["io_bytes"].as_u64().unwrap_or(0);
    if bytes == 0 {
        return Err("fio read nothing".into());
    }
    let pct = |k: &str| r["clat_ns"]["percentile"][k].as_f64();
    Ok(FioOut {
        engine: String::new(),
        bw_bytes: r["bw_bytes"].as_f64().unwrap_or(0.0),
        iops: r["iops"].as_f64().unwrap_or(0.0),
        p50_ns: pct("50.000000"),
        p99_ns: pct("99.000000"),
        resident: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_json_is_read_and_failures_are_reported() {
        let json = r#"fio: a warning line
{ "jobs": [ { "error": 0, "read": { "io_bytes": 4096000, "bw_bytes": 400000000,
  "iops": 97656.2, "clat_ns": { "percentile": { "50.000000": 288768, "99.000000": 987136 } } } } ] }"#;
        let f = parse_fio(json).unwrap();
        assert_eq!(f.bw_bytes, 4e8);
        assert_eq!(f.iops, 97656.2);
        assert_eq!((f.p50_ns, f.p99_ns), (Some(288768.0), Some(987136.0)));
        assert!(parse_fio("nothing").is_err());
        assert!(parse_fio(r#"{"jobs":[{"error":5,"read":{}}]}"#).is_err());
        assert!(parse_fio(r#"{"jobs":[{"error":0,"read":{"io_bytes":0}}]}"#).is_err());
    }

    #[test]
    fn a_missing_fio_is_refused_and_no_fio_finds_none() {
        let dir = tempfile::tempdir().unwrap();
        let missing = FioArgs {
            fio: Some(dir.path().join("no-fio-here")),
            no_fio: false,
        };
        assert!(missing.find().err().unwrap().0.contains("--fio"));
        let none = FioArgs {
            fio: None,
            no_fio: true,
        };
        assert_eq!(none.find().unwrap(), None);
        assert!(none.header("x", None, "").contains("--no-fio"));
    }
}
