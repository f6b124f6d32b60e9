//! The guest's CPUID: what KVM supports, with each vCPU's APIC ID filled in.

use kvm_bindings::CpuId;

/// Sets vCPU `index`'s initial APIC ID (leaf 1 EBX[31:24]) and x2APIC ID
/// (leaves 0xB and 0x1F, EDX) in `cpuid`.
pub fn set_apic_id(cpuid: &mut CpuId, index: u32) {
    for e in cpuid.as_mut_slice() {
        match e.function {
            1 => e.ebx = (e.ebx & 0x00ff_ffff) | ((index & 0xff) << 24),
            0xb | 0x1f => e.edx = index,
            _ => {}
        }
    }
}

/// Whether `cpuid` exposes IA32_TSC_ADJUST (CPUID.(7,0):EBX[1]).
pub fn has_tsc_adjust(cpuid: &CpuId) -> bool {
    cpuid
        .as_slice()
        .iter()
        .any(|e| e.function == 7 && e.index == 0 && e.ebx & (1 << 1) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::kvm_cpuid_entry2;

    fn entry(function: u32, index: u32, ebx: u32) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 {
            function,
            index,
            ebx,
            ..Default::default()
        }
    }

    #[test]
    fn apic_id_goes_into_the_top_byte_of_leaf_1_ebx() {
        let mut c = CpuId::from_entries(&[entry(1, 0, 0x0012_3456), entry(0xb, 0, 0)])
            .expect("two entries fit");
        set_apic_id(&mut c, 5);
        assert_eq!(c.as_slice()[0].ebx, 0x0512_3456);
        assert_eq!(c.as_slice()[1].edx, 5);
    }

    #[test]
    fn tsc_adjust_bit_is_read_from_leaf_7_subleaf_0() {
        let with = CpuId::from_entries(&[entry(7, 0, 2)]).expect("fits");
        let sub1 = CpuId::from_entries(&[entry(7, 1, 2)]).expect("fits");
        assert!(has_tsc_adjust(&with));
        assert!(!has_tsc_adjust(&sub1));
    }
}
