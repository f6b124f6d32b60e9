//! The balanced, seeded schedule of a comparison: VMs, each with its
//! warm-up rounds and its blocks, every block running each variant once.

use tsc_contract::Variant;

use super::VmPlan;
use crate::inference::Rng;

/// The balanced, seeded schedule: VMs, each with its warm-up and its blocks.
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
        let mut warm = Vec::with_capacity(warmup as usize);
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
