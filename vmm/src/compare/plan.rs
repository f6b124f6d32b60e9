//! The balanced, seeded schedule of a comparison: VMs, each with its
//! warm-up rounds and its blocks, every block running each variant once.
//!
//! It is drawn as the rounds start ([`Blocks`], [`VmSchedule`]): nothing is
//! allocated in proportion to the rounds, so `--rounds 100000000` (or a run
//! by time, which has no end in rounds) starts at once. [`plan`] lists the
//! same schedule, for tests and small plans.

use std::time::Instant;

use tsc_contract::Variant;

use crate::run::Schedule;
use crate::stats::inference::Rng;

/// Blocks of the variants, each in an order drawn from the seeded PRNG,
/// handed out one variant at a time.
#[derive(Clone, Debug)]
pub struct Blocks {
    rng: Rng,
    variants: Vec<Variant>,
    block: Vec<Variant>,
    at: usize,
}

impl Blocks {
    /// The blocks of `variants` under `seed`.
    pub fn new(variants: &[Variant], seed: u64) -> Blocks {
        Blocks {
            rng: Rng::new(seed),
            variants: variants.to_vec(),
            block: variants.to_vec(),
            at: variants.len(),
        }
    }

    /// Variants per block.
    pub fn len(&self) -> u32 {
        self.variants.len() as u32
    }

    /// Whether there are no variants (then nothing is ever drawn).
    pub fn is_empty(&self) -> bool {
        self.variants.is_empty()
    }

    /// The next variant: the next of the current block, or the first of a
    /// freshly shuffled one.
    pub fn next_variant(&mut self) -> Variant {
        if self.at >= self.block.len() {
            self.block.copy_from_slice(&self.variants);
            self.rng.shuffle(&mut self.block);
            self.at = 0;
        }
        let v = self.block.get(self.at).copied().unwrap_or(Variant::XenHead);
        self.at += 1;
        v
    }

    /// Drops the rest of the current block: the next variant starts a new
    /// one (a VM's warm-up ends, or a VM starts).
    pub fn restart(&mut self) {
        self.at = self.block.len();
    }
}

/// One VM's rounds: `warmup` rounds from whole blocks (the last one cut
/// short), then `blocks` measured blocks; with `until`, the measured blocks
/// end at the first block boundary after that instant (at least one block
/// is measured).
#[derive(Debug)]
pub struct VmSchedule<'a> {
    blocks: &'a mut Blocks,
    warmup: u32,
    measured_blocks: u32,
    until: Option<Instant>,
    drawn: u32,
}

impl<'a> VmSchedule<'a> {
    /// A VM's share of `blocks`. `measured_blocks` is cut to what fits the
    /// 32-bit round counter with the warm-up.
    pub fn new(
        blocks: &'a mut Blocks,
        warmup: u32,
        measured_blocks: u32,
        until: Option<Instant>,
    ) -> VmSchedule<'a> {
        let len = blocks.len().max(1);
        let fits = (u32::MAX - warmup) / len;
        VmSchedule {
            blocks,
            warmup,
            measured_blocks: measured_blocks.min(fits),
            until,
            drawn: 0,
        }
    }
}

impl Schedule for VmSchedule<'_> {
    fn max_rounds(&self) -> u32 {
        if self.blocks.is_empty() {
            return 0;
        }
        self.warmup + self.measured_blocks * self.blocks.len()
    }

    fn next_variant(&mut self) -> Variant {
        if self.drawn == 0 || self.drawn == self.warmup {
            self.blocks.restart();
        }
        self.drawn = self.drawn.saturating_add(1);
        self.blocks.next_variant()
    }

    fn ends_after(&self, completed: u32) -> bool {
        let len = self.blocks.len().max(1);
        self.until.is_some_and(|t| Instant::now() >= t)
            && completed >= self.warmup.saturating_add(len)
            && (completed - self.warmup) % len == 0
    }
}

/// One VM's share of the schedule, as [`plan`] lays it out.
#[cfg(test)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmPlan {
    /// Warm-up rounds, run first and excluded.
    pub warmup: Vec<Variant>,
    /// Measured rounds, whole blocks.
    pub measured: Vec<Variant>,
    /// Index of the VM's first block.
    pub first_block: u32,
}

#[cfg(test)]
/// The whole schedule as lists (for tests and small plans; the commands
/// draw it with [`VmSchedule`]).
pub fn plan(
    variants: &[Variant],
    rounds: u32,
    warmup: u32,
    fresh_vm_every: u32,
    seed: u64,
) -> Vec<VmPlan> {
    if variants.is_empty() {
        return Vec::new();
    }
    let mut blocks = Blocks::new(variants, seed);
    let per_vm = if fresh_vm_every == 0 {
        rounds.max(1)
    } else {
        fresh_vm_every
    };
    let mut vms = Vec::new();
    let mut first_block = 0;
    while first_block < rounds {
        let n = per_vm.min(rounds - first_block);
        let mut s = VmSchedule::new(&mut blocks, warmup, n, None);
        let all: Vec<Variant> = (0..s.max_rounds()).map(|_| s.next_variant()).collect();
        let (warm, measured) = all.split_at(warmup as usize);
        vms.push(VmPlan {
            warmup: warm.to_vec(),
            measured: measured.to_vec(),
            first_block,
        });
        first_block += n;
    }
    vms
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsc_contract::Variant;

    const V3: [Variant; 3] = [Variant::Xen415, Variant::Xen6ca022a1, Variant::XenHead];

    #[test]
    fn every_block_runs_each_variant_once() {
        let vms = plan(&V3, 50, 7, 0, 11);
        assert_eq!(vms.len(), 1);
        let m = &vms[0].measured;
        assert_eq!(m.len(), 150);
        for block in m.chunks(3) {
            let mut b = block.to_vec();
            b.sort_by_key(|v| *v as u32);
            assert_eq!(b, V3.to_vec());
        }
        assert_eq!(vms[0].warmup.len(), 7);
        // Not one fixed order: the blocks are shuffled.
        assert!(m.chunks(3).any(|b| b != &m[0..3]));
    }

    #[test]
    fn nothing_to_compare_plans_no_vm() {
        assert!(plan(&[], 10, 5, 0, 1).is_empty());
        assert!(plan(&V3, 0, 5, 0, 1).is_empty());
    }

    #[test]
    fn the_schedule_is_fixed_by_the_seed() {
        assert_eq!(plan(&V3, 20, 3, 0, 5), plan(&V3, 20, 3, 0, 5));
        assert_ne!(plan(&V3, 20, 3, 0, 5), plan(&V3, 20, 3, 0, 6));
    }

    /// The schedule as the first version of `compare` drew it, all at once:
    /// the lazy one must give the same order for the same seed.
    fn eager(
        variants: &[Variant],
        rounds: u32,
        warmup: u32,
        fresh_vm_every: u32,
        seed: u64,
    ) -> Vec<VmPlan> {
        let mut rng = Rng::new(seed);
        let mut block = || {
            let mut b = variants.to_vec();
            rng.shuffle(&mut b);
            b
        };
        let per_vm = if fresh_vm_every == 0 {
            rounds.max(1)
        } else {
            fresh_vm_every
        };
        let mut vms = Vec::new();
        let mut first_block = 0;
        while first_block < rounds {
            let blocks = per_vm.min(rounds - first_block);
            let mut warm = Vec::new();
            while warm.len() < warmup as usize {
                warm.extend(block());
            }
            warm.truncate(warmup as usize);
            let measured = (0..blocks).flat_map(|_| block()).collect();
            vms.push(VmPlan {
                warmup: warm,
                measured,
                first_block,
            });
            first_block += blocks;
        }
        vms
    }

    #[test]
    fn the_drawn_schedule_is_the_one_the_seed_always_gave() {
        for (rounds, warmup, fresh, seed) in
            [(50, 7, 0, 11), (7, 2, 3, 1), (9, 0, 1, 4), (5, 3, 0, 9)]
        {
            assert_eq!(
                plan(&V3, rounds, warmup, fresh, seed),
                eager(&V3, rounds, warmup, fresh, seed),
                "{rounds} rounds, warm-up {warmup}, fresh every {fresh}, seed {seed}"
            );
        }
    }

    /// A schedule of a hundred million blocks is drawn, not listed: it
    /// starts at once and costs nothing per round it has not reached.
    #[test]
    fn a_huge_schedule_allocates_nothing_up_front() {
        let mut blocks = Blocks::new(&V3, 3);
        let mut s = VmSchedule::new(&mut blocks, 20, 100_000_000, None);
        assert_eq!(s.max_rounds(), 300_000_020);
        let first: Vec<Variant> = (0..26).map(|_| s.next_variant()).collect();
        // Past the warm-up, every block is each variant once.
        let mut b = first[20..23].to_vec();
        b.sort_by_key(|v| *v as u32);
        assert_eq!(b, V3.to_vec());
        // Beyond the 32-bit round counter, the blocks are cut to fit.
        let mut blocks = Blocks::new(&V3, 3);
        let s = VmSchedule::new(&mut blocks, 20, u32::MAX, None);
        assert!(s.max_rounds() >= u32::MAX - 3);
    }

    #[test]
    fn a_schedule_by_time_ends_at_a_block_boundary_after_its_time() {
        let past = Instant::now() - std::time::Duration::from_secs(1);
        let mut blocks = Blocks::new(&V3, 3);
        let s = VmSchedule::new(&mut blocks, 4, u32::MAX, Some(past));
        assert!(!s.ends_after(4), "not before a block is measured");
        assert!(!s.ends_after(5), "not inside a block");
        assert!(s.ends_after(7));
        assert!(!s.ends_after(8));
        assert!(s.ends_after(10));
        let mut blocks = Blocks::new(&V3, 3);
        let later = Instant::now() + std::time::Duration::from_secs(3600);
        let s = VmSchedule::new(&mut blocks, 4, u32::MAX, Some(later));
        assert!(!s.ends_after(7), "its time is not up");
    }

    #[test]
    fn fresh_vms_split_the_blocks_and_each_warms_up() {
        let vms = plan(&V3[..2], 7, 2, 3, 1);
        assert_eq!(vms.len(), 3);
        let sizes: Vec<usize> = vms.iter().map(|p| p.measured.len()).collect();
        assert_eq!(sizes, vec![6, 6, 2]);
        assert_eq!(
            vms.iter().map(|p| p.first_block).collect::<Vec<_>>(),
            vec![0, 3, 6]
        );
        assert!(vms.iter().all(|p| p.warmup.len() == 2));
        let total = |v: Variant| {
            vms.iter()
                .flat_map(|p| &p.measured)
                .filter(|&&x| x == v)
                .count()
        };
        assert_eq!((total(V3[0]), total(V3[1])), (7, 7));
    }
}
