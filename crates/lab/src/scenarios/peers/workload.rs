//! The workload of `peers`: the data file, the per-thread block traces, and the expected bytes.
//!
//! - **The file.** Generated: word `i` (the 8 bytes at offset `8 i`, little endian) is
//!   [`word`]`(i)`, a mix of `i`, so any block's expected bytes can be recomputed from its
//!   number alone and a block returned from the wrong offset cannot pass. A user's `--file`
//!   is checked against direct positional reads of the same file instead.
//! - **The traces.** Every thread replays its own precomputed sequence of block numbers
//!   (a power of two long, wrapping), so generating keys costs nothing in the measured loop,
//!   and every contender sees exactly the same sequence per thread. Zipf ranks are scattered
//!   over the file by a fixed bijection ([`Scatter`]) so that hot blocks are not neighbours
//!   (a storage engine's hot blocks are spread over its files; clustering them would hand
//!   readahead and the hardware prefetcher a win the workload does not offer).
//! - **The Zipf sampler.** Rejection-inversion (W. Hörmann and G. Derflinger, "Rejection-
//!   inversion to generate variates from monotone discrete distributions", 1996): O(1) memory
//!   and time per sample for any number of blocks and any exponent `s > 0`, exact (it samples
//!   the Zipf law itself, not an approximation); written here from the paper's formulas in a
//!   few lines rather than adding `rand_distr` (which implements the same method) for one
//!   function. The test compares its frequencies with the exact probabilities.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes per block by default (a page, and a typical storage-engine block).
pub const BLOCK: usize = 4096;

/// Bytes of a page of a generated file: the unit [`generate`] writes its words in (word `i`
/// is at byte `8 i` whatever the block size).
const PAGE: usize = 4096;

/// The block size of this process's run (`--block`), [`BLOCK`] unless [`set_block`] changed
/// it: one scenario runs at a time in a process, and every contender reads whole blocks.
static BLOCK_BYTES: AtomicUsize = AtomicUsize::new(BLOCK);

/// Bytes per block of the current run.
#[inline]
pub fn block() -> usize {
    BLOCK_BYTES.load(Ordering::Relaxed)
}

/// Sets the block size of the run that starts (a multiple of 8 bytes).
pub fn set_block(bytes: usize) {
    assert!(bytes >= 8 && bytes % 8 == 0, "blocks are whole words");
    BLOCK_BYTES.store(bytes, Ordering::Relaxed);
}

const CONTENT_SEED: u64 = 0x666f_6c69_6f63_6163;

/// Blocks in one sequential scan of the `scan` mix.
pub const SCAN_LEN: u64 = 64;

/// SplitMix64's output function: a bijective mix of a 64-bit value.
#[inline]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 8-byte word at byte offset `8 i` of a generated file.
#[inline]
pub fn word(i: u64) -> u64 {
    splitmix64(i ^ CONTENT_SEED)
}

/// Writes a generated file of `pages` pages of 4 KiB to `path`.
pub fn generate(path: &Path, pages: u64) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut buf = [0u8; PAGE];
    for b in 0..pages {
        for (j, w) in buf.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&word(b * (PAGE / 8) as u64 + j as u64).to_le_bytes());
        }
        out.write_all(&buf)?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// What a correct block contains.
#[derive(Debug)]
pub enum Content {
    /// A generated file: every word is [`word`] of its index.
    Generated,
    /// A user's file: the truth is a direct positional read of it.
    Reference(File),
}

#[inline]
fn le_word(data: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&data[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Content {
    /// The cheap check every read makes: the block's first and last words (which also makes
    /// every contender's caller touch the data it was given).
    #[inline]
    pub fn spot(&self, block: u32, data: &[u8]) -> bool {
        let (bytes, words) = (self::block(), self::block() as u64 / 8);
        if data.len() != bytes {
            return false;
        }
        let (first, last) = (le_word(data, 0), le_word(data, bytes - 8));
        match self {
            Content::Generated => {
                let base = u64::from(block) * words;
                first == word(base) && last == word(base + words - 1)
            }
            Content::Reference(_) => std::hint::black_box(first ^ last) == first ^ last,
        }
    }

    /// The check of one read of `block`: [`Content::full`] if `full`, else [`Content::spot`].
    #[inline]
    pub fn check(&self, block: u32, data: &[u8], full: bool) -> bool {
        if full {
            self.full(block, data)
        } else {
            self.spot(block, data)
        }
    }

    /// The full check of a sampled read: every byte of the block.
    pub fn full(&self, block: u32, data: &[u8]) -> bool {
        let bytes = self::block();
        if data.len() != bytes {
            return false;
        }
        match self {
            Content::Generated => {
                let base = u64::from(block) * (bytes / 8) as u64;
                data.chunks_exact(8)
                    .enumerate()
                    .all(|(j, w)| le_word(w, 0) == word(base + j as u64))
            }
            Content::Reference(f) => {
                let mut truth = vec![0u8; bytes];
                f.read_exact_at(&mut truth, u64::from(block) * bytes as u64)
                    .is_ok()
                    && truth[..] == data[..]
            }
        }
    }
}

/// A small deterministic generator (SplitMix64), so traces do not depend on a crate's
/// version.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix64(self.0)
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, n)` (`n > 0`; the bias of the multiply-shift is below 2^-32 here).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The Zipf distribution on ranks `1..=n` with exponent `s > 0`, `P(k) ∝ k^-s`, sampled by
/// rejection-inversion.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    threshold: f64,
}

/// `ln(1 + x) / x`, accurate near 0.
fn log1p_over(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x / 3.0)
    }
}

/// `(e^x - 1) / x`, accurate near 0.
fn expm1_over(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * (0.5 + x / 6.0)
    }
}

impl Zipf {
    /// The distribution over `n >= 1` ranks with exponent `s > 0`.
    pub fn new(n: u64, s: f64) -> Zipf {
        assert!(
            n >= 1 && s > 0.0 && s.is_finite(),
            "Zipf needs n >= 1, s > 0"
        );
        let mut z = Zipf {
            n: n as f64,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            threshold: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(n as f64 + 0.5);
        z.threshold = 2.0 - z.h_integral_inv(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// `H(x) = (x^(1-s) - 1) / (1 - s)` (`ln x` when `s = 1`): an antiderivative of `h`.
    fn h_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        expm1_over((1.0 - self.s) * lx) * lx
    }

    /// `h(x) = x^-s`.
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// The inverse of [`Zipf::h_integral`].
    fn h_integral_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.s)).max(-1.0);
        (log1p_over(t) * y).exp()
    }

    /// One rank in `1..=n`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.next_f64() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inv(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.threshold || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

/// A fixed bijection of `0..n` (xorshift and odd multiplies on the next power of two,
/// cycle-walking back into range): where the Zipf rank `r` lives in the file.
#[derive(Clone, Debug)]
pub struct Scatter {
    n: u64,
    bits: u32,
    mask: u64,
}

impl Scatter {
    /// The bijection of `0..n` (`n >= 1`).
    pub fn new(n: u64) -> Scatter {
        let bits = 64 - (n.max(2) - 1).leading_zeros();
        Scatter {
            n,
            bits,
            mask: if bits == 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            },
        }
    }

    fn round(&self, mut x: u64) -> u64 {
        let half = (self.bits / 2).max(1);
        x ^= x >> half;
        x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15) & self.mask;
        x ^= x >> half;
        x.wrapping_mul(0xd6e8_feb8_6659_fd93) & self.mask
    }

    /// The image of `x < n`.
    pub fn apply(&self, x: u64) -> u64 {
        let mut y = self.round(x);
        while y >= self.n {
            y = self.round(y);
        }
        y
    }
}

/// An access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mix {
    /// Zipf-distributed blocks (`--skew`), the hot blocks scattered over the file.
    Zipf,
    /// Every block equally likely.
    Uniform,
    /// Scan-heavy: half the reads are sequential scans of 64 blocks from a uniform start,
    /// the other half Zipf reads (a compaction or a range query beside point lookups).
    Scan,
    /// Zipf reads (`--skew`) of a working set half the budget, scattered over the file: after
    /// the warm-up every read hits, so only the hit path is measured.
    Resident,
}

impl Mix {
    /// Its stable name (the rows' `mix` field).
    pub fn name(self) -> &'static str {
        match self {
            Mix::Zipf => "zipf",
            Mix::Uniform => "uniform",
            Mix::Scan => "scan",
            Mix::Resident => "resident",
        }
    }
}

/// Blocks of the `resident` mix's working set under a budget of `budget_blocks`: half of it,
/// so that no contender's sharding or watermarks evict any of it.
pub fn resident_blocks(budget_blocks: usize) -> u64 {
    (budget_blocks as u64 / 2).max(1)
}

/// A trace of `len` (a power of two) block numbers below `blocks` for one thread (the
/// `resident` mix's working set: all `blocks`).
pub fn trace(mix: Mix, blocks: u64, skew: f64, len: usize, seed: u64) -> Vec<u32> {
    trace_in(mix, blocks, blocks, skew, len, seed)
}

/// [`trace`], where the `resident` mix reads only `working_set` of the `blocks` (the other
/// mixes read all of them).
pub fn trace_in(
    mix: Mix,
    blocks: u64,
    working_set: u64,
    skew: f64,
    len: usize,
    seed: u64,
) -> Vec<u32> {
    assert!(len.is_power_of_two() && blocks >= 1 && blocks <= u64::from(u32::MAX));
    let mut rng = Rng::new(seed);
    let ranks = if mix == Mix::Resident {
        working_set.clamp(1, blocks)
    } else {
        blocks
    };
    let zipf = Zipf::new(ranks, skew);
    let scatter = Scatter::new(blocks);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        match mix {
            Mix::Uniform => out.push(rng.below(blocks) as u32),
            Mix::Zipf | Mix::Resident => out.push(scatter.apply(zipf.sample(&mut rng) - 1) as u32),
            Mix::Scan => {
                // One scan per SCAN_LEN point reads on average: half the reads are scans.
                if rng.below(SCAN_LEN + 1) == 0 {
                    let start = rng.below(blocks);
                    for i in 0..SCAN_LEN {
                        out.push(((start + i) % blocks) as u32);
                    }
                } else {
                    out.push(scatter.apply(zipf.sample(&mut rng) - 1) as u32);
                }
            }
        }
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frequencies of 400k samples against the exact probabilities, for exponents below, at
    /// and above 1 (the three branches of the helper functions).
    #[test]
    fn zipf_matches_the_exact_law() {
        for s in [0.5, 0.99, 1.0, 1.5] {
            let n = 12u64;
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
            let z = Zipf::new(n, s);
            let mut rng = Rng::new(7);
            let mut counts = vec![0u64; n as usize + 1];
            let samples = 400_000;
            for _ in 0..samples {
                let k = z.sample(&mut rng);
                assert!((1..=n).contains(&k));
                counts[k as usize] += 1;
            }
            for k in 1..=n {
                let p = (k as f64).powf(-s) / norm;
                let f = counts[k as usize] as f64 / samples as f64;
                // 6 standard deviations of a binomial frequency.
                let tol = 6.0 * (p * (1.0 - p) / samples as f64).sqrt();
                assert!((f - p).abs() < tol, "s={s} k={k}: {f} vs {p}");
            }
        }
    }

    #[test]
    fn zipf_with_one_rank_and_many() {
        let mut rng = Rng::new(1);
        assert_eq!(Zipf::new(1, 0.99).sample(&mut rng), 1);
        let z = Zipf::new(1 << 30, 0.99);
        for _ in 0..1000 {
            assert!((1..=1 << 30).contains(&z.sample(&mut rng)));
        }
    }

    #[test]
    fn scatter_is_a_bijection() {
        for n in [1u64, 2, 3, 100, 1024, 4097] {
            let s = Scatter::new(n);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = s.apply(x);
                assert!(y < n && !seen[y as usize], "n={n} x={x} y={y}");
                seen[y as usize] = true;
            }
        }
    }

    #[test]
    fn traces_stay_in_range_and_scans_are_half() {
        for mix in [Mix::Zipf, Mix::Uniform, Mix::Scan, Mix::Resident] {
            let t = trace_in(mix, 1000, 100, 0.99, 1 << 14, 3);
            assert_eq!(t.len(), 1 << 14);
            assert!(t.iter().all(|&b| b < 1000));
        }
        let t = trace(Mix::Scan, 1 << 20, 0.99, 1 << 16, 3);
        let sequential = t.windows(2).filter(|w| w[1] == w[0] + 1).count();
        let frac = sequential as f64 / t.len() as f64;
        assert!((0.4..0.6).contains(&frac), "{frac}");
    }

    /// The resident mix reads exactly its working set's blocks (all of them, over a long
    /// trace), scattered beyond the first `working_set` blocks of the file.
    #[test]
    fn resident_traces_read_only_their_working_set() {
        let t = trace_in(Mix::Resident, 4096, 64, 0.99, 1 << 16, 5);
        let mut seen: Vec<u32> = t.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 64);
        assert!(seen.iter().any(|&b| b >= 64), "{seen:?}");
    }

    #[test]
    fn generated_blocks_verify_and_wrong_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        generate(&path, 3).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 3 * BLOCK);
        let reference = Content::Reference(File::open(&path).unwrap());
        for b in 0..3u32 {
            let blk = &bytes[b as usize * BLOCK..(b as usize + 1) * BLOCK];
            for c in [&Content::Generated, &reference] {
                assert!(c.spot(b, blk) && c.full(b, blk));
            }
            assert!(!Content::Generated.spot(b ^ 1, blk));
            assert!(!Content::Generated.full(b ^ 1, blk));
            assert!(!reference.full(b ^ 1, blk));
        }
        let mut bad = bytes[..BLOCK].to_vec();
        bad[100] ^= 1;
        assert!(Content::Generated.spot(0, &bad) && !Content::Generated.full(0, &bad));
        assert!(!reference.full(0, &bad));
        assert!(!Content::Generated.spot(0, &bytes[..100]));
    }
}
