//! The crash check's workload and its checks, shared by the example (`main.rs`) and its kill
//! test (`tests/wal_store.rs`): a deterministic sequence of updates, so the process that
//! killed the writer knows what it wrote.

use std::io;

use super::store::{Store, HEADER};

/// The page (of `pages`) and the bytes of update `k` (from 1): its number, then filler.
pub fn update_of(k: u64, pages: u64) -> (u64, Vec<u8>) {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (
        x % pages,
        [k.to_le_bytes().as_slice(), &[0xAB; 92]].concat(),
    )
}

/// The pages that do not hold their last update up to `committed` (a later update of the
/// same page is fine: the log may have held it too).
pub fn missing(s: &Store, pages: u64, committed: u64) -> io::Result<u64> {
    let mut want = vec![0u64; pages as usize];
    for k in 1..=committed {
        want[update_of(k, pages).0 as usize] = k;
    }
    let mut missing = 0;
    for (page, &k) in want.iter().enumerate() {
        let mut v = [0u8; 8];
        s.read(page as u64, HEADER, &mut v)?;
        let got = u64::from_le_bytes(v);
        if got < k || (got != 0 && update_of(got, pages).0 != page as u64) {
            missing += 1;
        }
    }
    Ok(missing)
}

/// The write-ahead rule, seen from the files: the first page holding a change the log does
/// not (its page LSN past the log's last record), as `(page, page LSN)`.
pub fn ahead_of_log(s: &Store, pages: u64) -> io::Result<Option<(u64, u64)>> {
    let last = s.last_lsn();
    for page in 0..pages {
        let lsn = s.page_lsn(page)?;
        if lsn > last {
            return Ok(Some((page, lsn)));
        }
    }
    Ok(None)
}
