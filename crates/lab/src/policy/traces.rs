//! The harness's synthetic traces: block-number sequences generated from a seed, the same
//! on every machine and every run (SplitMix64 and the rejection-inversion Zipf sampler of
//! the `peers` workload, no crate whose version could change them).
//!
//! Sizes ([`Size`]): a file of `blocks` 4 KiB blocks, a cache of `capacity` blocks (1/8 of
//! the file), `reads` reads. Zipf ranks are scattered over the file by a fixed bijection so
//! hot blocks are not neighbours; loops and scans read consecutive blocks.
//!
//! | trace | what it reads |
//! |---|---|
//! | `zipf-0.6` .. `zipf-1.2` | Zipf over the whole file at that exponent |
//! | `zipf-scan` | Zipf 0.99, and after every `4 c` Zipf reads a sequential scan of `c` blocks from a random start |
//! | `loop-1.1x`, `loop-1.25x`, `loop-2x` | blocks `0 .. f c` in order, again and again |
//! | `loop-*-noise` | the same, each read replaced with probability 10% by a Zipf 0.99 read of the whole file |
//! | `moving-hot` | Zipf 0.99 whose hot set moves to other blocks every `5 c` reads (each phase maps ranks to blocks with a new random offset) |
//! | `two-tenants` | each read, with probability 1/2, from tenant A (Zipf 1.2 over the first half of the file) or B (Zipf 0.6 over the second half) |
//! | `recency-bursts` | half the reads from a burst group of 48 random blocks, replaced every 400 reads; the other half Zipf 0.99 |
//! | `readahead-mix` | half the reads continue a sequential run (32 blocks from a random start, then a new run), half are Zipf 0.99 |
//!
//! (`c` is the capacity in blocks.)

pub use crate::scenarios::peers::workload::{Rng, Scatter, Zipf};

/// Trace sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Unit tests: 2,048 blocks (8 MiB), a cache of 256, 20,000 reads.
    Tiny,
    /// `--quick` and the libCacheSim cross-check: 8,192 blocks (32 MiB), a cache of 1,024
    /// (4 MiB), 100,000 reads.
    Quick,
    /// Full runs, the setting: 65,536 blocks (256 MiB), a cache of 8,192 (32 MiB),
    /// 1,000,000 reads.
    Full,
}

/// The dimensions of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Blocks in the file.
    pub blocks: u64,
    /// Cache capacity in blocks.
    pub capacity: usize,
    /// Reads per trace.
    pub reads: usize,
}

impl Size {
    /// Its dimensions.
    pub fn spec(self) -> Spec {
        let (blocks, reads) = match self {
            Size::Tiny => (2048, 20_000),
            Size::Quick => (8192, 100_000),
            Size::Full => (65_536, 1_000_000),
        };
        Spec {
            blocks,
            capacity: (blocks / 8) as usize,
            reads,
        }
    }

    /// Its name in JSON and file names.
    pub fn name(self) -> &'static str {
        match self {
            Size::Tiny => "tiny",
            Size::Quick => "quick",
            Size::Full => "full",
        }
    }
}

/// An access pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trace {
    /// Zipf with this exponent.
    Zipf(f64),
    /// Zipf 0.99 with periodic sequential scans.
    ZipfScan,
    /// A loop over this multiple of the capacity, with 10% Zipf noise if `noise`.
    Loop {
        /// Loop length over capacity.
        factor: f64,
        /// Whether 10% of reads are Zipf 0.99 reads instead.
        noise: bool,
    },
    /// Zipf 0.99 whose hot set moves.
    MovingHot,
    /// Two tenants of different skews, interleaved.
    TwoTenants,
    /// Bursts of recency over Zipf background.
    RecencyBursts,
    /// Sequential runs interleaved with Zipf reads.
    ReadaheadMix,
}

/// The Zipf exponent of the background, noise and moving-hot reads.
const SKEW: f64 = 0.99;
/// Blocks in a burst group of `recency-bursts`.
pub const BURST_BLOCKS: u64 = 48;
/// Reads a burst group lasts.
pub const BURST_READS: usize = 400;
/// Blocks in a sequential run of `readahead-mix`.
pub const RUN_BLOCKS: u64 = 32;

impl Trace {
    /// Every trace, in table order.
    pub const ALL: [Trace; 15] = [
        Trace::Zipf(0.6),
        Trace::Zipf(0.8),
        Trace::Zipf(0.99),
        Trace::Zipf(1.2),
        Trace::ZipfScan,
        Trace::Loop {
            factor: 1.1,
            noise: false,
        },
        Trace::Loop {
            factor: 1.25,
            noise: false,
        },
        Trace::Loop {
            factor: 2.0,
            noise: false,
        },
        Trace::Loop {
            factor: 1.1,
            noise: true,
        },
        Trace::Loop {
            factor: 1.25,
            noise: true,
        },
        Trace::Loop {
            factor: 2.0,
            noise: true,
        },
        Trace::MovingHot,
        Trace::TwoTenants,
        Trace::RecencyBursts,
        Trace::ReadaheadMix,
    ];

    /// Its stable name.
    pub fn name(self) -> String {
        match self {
            Trace::Zipf(s) => format!("zipf-{s}"),
            Trace::ZipfScan => "zipf-scan".into(),
            Trace::Loop { factor, noise } => {
                format!("loop-{factor}x{}", if noise { "-noise" } else { "" })
            }
            Trace::MovingHot => "moving-hot".into(),
            Trace::TwoTenants => "two-tenants".into(),
            Trace::RecencyBursts => "recency-bursts".into(),
            Trace::ReadaheadMix => "readahead-mix".into(),
        }
    }

    /// The trace called `name`.
    pub fn parse(name: &str) -> Option<Trace> {
        Trace::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether it has sequential runs (scans, loops, readahead runs): where readahead would
    /// change what a cache misses.
    pub fn sequential(self) -> bool {
        !matches!(
            self,
            Trace::Zipf(_) | Trace::MovingHot | Trace::TwoTenants | Trace::RecencyBursts
        )
    }

    /// The trace's reads for `spec`, from `seed` (each trace mixes its name into the seed,
    /// so two traces of one run do not share random numbers).
    pub fn generate(self, spec: &Spec, seed: u64) -> Vec<u64> {
        let name_seed = self.name().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let mut rng = Rng::new(seed ^ name_seed);
        let n = spec.blocks;
        let c = spec.capacity as u64;
        let len = spec.reads;
        let scatter = Scatter::new(n);
        let zipf = Zipf::new(n, SKEW);
        let mut out = Vec::with_capacity(len + c as usize);
        let zipf_read = |rng: &mut Rng, z: &Zipf| scatter.apply(z.sample(rng) - 1);
        match self {
            Trace::Zipf(s) => {
                let z = Zipf::new(n, s);
                while out.len() < len {
                    out.push(zipf_read(&mut rng, &z));
                }
            }
            Trace::ZipfScan => {
                while out.len() < len {
                    for _ in 0..4 * c {
                        out.push(zipf_read(&mut rng, &zipf));
                    }
                    let start = rng.below(n);
                    out.extend((0..c).map(|i| (start + i) % n));
                }
            }
            Trace::Loop { factor, noise } => {
                let l = ((c as f64 * factor).round() as u64).clamp(1, n);
                let mut i = 0;
                while out.len() < len {
                    if noise && rng.below(10) == 0 {
                        out.push(zipf_read(&mut rng, &zipf));
                    } else {
                        out.push(i);
                        i = (i + 1) % l;
                    }
                }
            }
            Trace::MovingHot => {
                let phase = 5 * spec.capacity;
                while out.len() < len {
                    let offset = rng.below(n);
                    for _ in 0..phase {
                        let r = zipf.sample(&mut rng) - 1;
                        out.push(scatter.apply((r + offset) % n));
                    }
                }
            }
            Trace::TwoTenants => {
                let half = (n / 2).max(1);
                let (za, zb) = (Zipf::new(half, 1.2), Zipf::new(n - half, 0.6));
                let (sa, sb) = (Scatter::new(half), Scatter::new(n - half));
                while out.len() < len {
                    if rng.below(2) == 0 {
                        out.push(sa.apply(za.sample(&mut rng) - 1));
                    } else {
                        out.push(half + sb.apply(zb.sample(&mut rng) - 1));
                    }
                }
            }
            Trace::RecencyBursts => {
                let k = BURST_BLOCKS.min(n);
                while out.len() < len {
                    let group: Vec<u64> = (0..k).map(|_| rng.below(n)).collect();
                    for _ in 0..BURST_READS {
                        if rng.below(2) == 0 {
                            out.push(group[rng.below(k) as usize]);
                        } else {
                            out.push(zipf_read(&mut rng, &zipf));
                        }
                    }
                }
            }
            Trace::ReadaheadMix => {
                let (mut next, mut left) = (0u64, 0u64);
                while out.len() < len {
                    if rng.below(2) == 0 {
                        if left == 0 {
                            next = rng.below(n);
                            left = RUN_BLOCKS;
                        }
                        out.push(next % n);
                        next += 1;
                        left -= 1;
                    } else {
                        out.push(zipf_read(&mut rng, &zipf));
                    }
                }
            }
        }
        out.truncate(len);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_deterministic_in_range_and_named_uniquely() {
        let spec = Size::Tiny.spec();
        let mut names = Vec::new();
        for t in Trace::ALL {
            let a = t.generate(&spec, 1);
            assert_eq!(a.len(), spec.reads, "{}", t.name());
            assert!(a.iter().all(|&b| b < spec.blocks), "{}", t.name());
            assert!(a == t.generate(&spec, 1), "{}", t.name());
            let random = !matches!(t, Trace::Loop { noise: false, .. });
            assert_eq!(a != t.generate(&spec, 2), random, "{}", t.name());
            assert_eq!(Trace::parse(&t.name()), Some(t));
            names.push(t.name());
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Trace::ALL.len());
    }

    #[test]
    fn loops_and_bursts_have_their_shape() {
        let spec = Size::Tiny.spec();
        let c = spec.capacity as u64;
        let t = Trace::Loop {
            factor: 1.25,
            noise: false,
        }
        .generate(&spec, 1);
        assert!(t.iter().all(|&b| b < c * 5 / 4));
        assert_eq!(
            t[c as usize * 5 / 4],
            0,
            "the loop wraps after 1.25 c blocks"
        );
        let noisy = Trace::Loop {
            factor: 1.25,
            noise: true,
        }
        .generate(&spec, 1);
        let outside = noisy.iter().filter(|&&b| b >= c * 5 / 4).count() as f64;
        // About 10% noise, most of it outside the loop's blocks.
        assert!((0.05..0.12).contains(&(outside / noisy.len() as f64)));
        let b = Trace::RecencyBursts.generate(&spec, 1);
        let first: std::collections::HashSet<u64> = b[..BURST_READS].iter().copied().collect();
        // 48 group blocks and about 200 background reads.
        assert!(first.len() < BURST_READS - 100, "{}", first.len());
    }
}
