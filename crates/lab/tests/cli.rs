//! The `foliocache-lab` binary's handling of bad input: every mistake is refused up front with
//! a message that names it, none panics, hangs or throws away a finished run (issue 16,
//! finding 6).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a run of the binary left: its exit code (`None` if it had to be killed at the
/// deadline), stdout and stderr.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// One lab process at a time: the 1024-thread run would otherwise starve the others' timed
/// start-up checks of CPU.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs the lab with `args`, killing it if it has not finished after `limit`.
fn lab(args: &[&str], limit: Duration) -> Ran {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_foliocache-lab"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code,
        stdout: std::fs::read_to_string(out).unwrap(),
        stderr: std::fs::read_to_string(err).unwrap(),
        took: start.elapsed(),
    }
}

/// Asserts the run failed cleanly (no panic, no hang) with `needle` in its error output.
fn refused(r: &Ran, needle: &str) {
    assert!(
        r.code.is_some(),
        "killed at the deadline after {:?}",
        r.took
    );
    assert_ne!(r.code, Some(0), "accepted; stdout: {}", r.stdout);
    assert!(!r.stderr.contains("panicked"), "panicked: {}", r.stderr);
    assert!(
        r.stderr.contains(needle),
        "no `{needle}` in the error: {}",
        r.stderr
    );
}

const QUICK: Duration = Duration::from_secs(20);

#[test]
fn a_huge_duration_is_refused_not_a_panic() {
    // 1e20 seconds used to overflow `Duration::from_secs_f64` and panic.
    for d in ["100000000000000000000", "1e20"] {
        let r = lab(&["refcount", "--duration", d, "--threads", "1"], QUICK);
        refused(&r, "above the cap");
    }
}

#[test]
fn zero_runs_is_refused() {
    // `--runs 0` used to run once, silently.
    let r = lab(&["refcount", "--runs", "0", "--threads", "1"], QUICK);
    refused(&r, "at least once");
}

#[test]
fn an_unwritable_result_path_fails_before_the_run() {
    // Used to fail only after the whole measurement (here 4 variants x 5 s), losing it.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/r.json");
    let folder = dir.path().to_str().unwrap().to_string();
    for (path, needle) in [
        (missing.to_str().unwrap(), "does not exist"),
        (folder.as_str(), "is a directory"),
    ] {
        let args = [
            "refcount",
            "--threads",
            "1",
            "--duration",
            "5s",
            "--runs",
            "1",
            "--no-progress",
            "--json",
            path,
        ];
        let r = lab(&args, QUICK);
        refused(&r, needle);
        assert!(r.took < Duration::from_secs(4), "ran first: {:?}", r.took);
    }
}

#[test]
fn peers_file_must_be_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let args = |f: &Path| {
        vec![
            "peers".to_string(),
            "--quick".into(),
            "--threads".into(),
            "1".into(),
            "--runs".into(),
            "1".into(),
            "--no-progress".into(),
            "--file".into(),
            f.to_str().unwrap().into(),
        ]
    };
    let run = |f: &Path| {
        let a = args(f);
        lab(&a.iter().map(String::as_str).collect::<Vec<_>>(), QUICK)
    };
    // A directory used to be accepted; a FIFO used to block the lab in open(2) forever.
    refused(&run(dir.path()), "not a regular file");
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused(&run(&fifo), "not a regular file");
}

#[test]
fn validate_reports_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    let mut report = foliocache_lab::harness::Report::new("refcount", "000", serde_json::json!({}));
    let mut il = foliocache_lab::harness::Interleaver::new();
    il.add("fetch-add", 1, "ops_per_sec", 1e6);
    report.add_rows(&il, &serde_json::Map::new());
    report.write_json(&good).unwrap();
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "not json").unwrap();
    let missing = dir.path().join("missing.json");
    let paths = [&garbage, &good, &missing].map(|p| p.to_str().unwrap().to_string());
    let mut args = vec!["validate"];
    args.extend(paths.iter().map(String::as_str));
    let r = lab(&args, QUICK);
    // It used to stop at the first bad file, saying nothing of the others.
    assert_eq!(r.code, Some(1), "{} {}", r.stdout, r.stderr);
    for p in &paths {
        assert!(
            r.stdout.contains(p.as_str()),
            "{p} not reported: {}",
            r.stdout
        );
    }
    assert!(r.stdout.contains("good.json: ok"), "{}", r.stdout);
}

#[test]
fn a_thousand_threads_start_in_bounded_time() {
    // 1024 threads used to take minutes per measurement on two CPUs (the barrier's hand-off
    // chain ran behind workers already spinning); above the cap is refused with a reason.
    let r = lab(
        &[
            "refcount",
            "--threads",
            "1024",
            "--duration",
            "20ms",
            "--runs",
            "1",
            "--no-progress",
            "--no-pin",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{:?}: {} {}", r.took, r.stdout, r.stderr);
    assert!(r.stdout.contains("rate_within_cpus"), "{}", r.stdout);
    let r = lab(&["refcount", "--threads", "1025"], QUICK);
    refused(&r, "cap of 1024 threads");
}

/// `peers --block 16k`: every contender reads whole 16 KiB blocks, every byte checked, and the
/// JSON records the size; a block that is not whole pages is refused.
#[test]
fn peers_reads_16k_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("peers.json");
    let r = lab(
        &[
            "peers",
            "--quick",
            "--block",
            "16k",
            "--file-mib",
            "4",
            "--threads",
            "1",
            "--runs",
            "1",
            "--duration",
            "20ms",
            "--contenders",
            "foliocache,foliocache-pinned,quick_cache,moka",
            "--no-progress",
            "--no-plot",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(
        r.code,
        Some(0),
        "stdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["params"]["block_bytes"], 16384, "{}", v["params"]);
    assert!(r
        .stdout
        .contains("check correct_bytes                           0  ok"));
    refused(
        &lab(&["peers", "--quick", "--block", "1000"], QUICK),
        "block size",
    );
}

/// `peers --async` (opt-in: `all` runs the synchronous mode): a tiny run on both runtimes,
/// fio beside it where it is installed, writes a report that `validate --strict` accepts.
#[test]
fn peers_async_runs_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("peers-async.json");
    let r = lab(
        &[
            "peers",
            "--async",
            "--quick",
            "--file-mib",
            "4",
            "--tasks",
            "8",
            "--duration",
            "50ms",
            "--runs",
            "1",
            "--dir",
            dir.path().to_str().unwrap(),
            "--no-progress",
            "--no-plot",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(
        r.code,
        Some(0),
        "stdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    assert!(r.stdout.contains("resident hits"), "{}", r.stdout);
    let v = lab(&["validate", "--strict", json.to_str().unwrap()], QUICK);
    assert_eq!(v.code, Some(0), "{} {}", v.stdout, v.stderr);
    refused(
        &lab(&["peers", "--async", "--tasks", "0"], QUICK),
        "task count",
    );
}
