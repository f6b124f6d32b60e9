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

/// Whether `cpuid` offers kvmclock through MSR_KVM_SYSTEM_TIME_NEW: KVM's
/// signature at leaf 0x4000_0000 and KVM_FEATURE_CLOCKSOURCE2 (leaf
/// 0x4000_0001 EAX bit 3).
pub fn has_kvmclock(cpuid: &CpuId) -> bool {
    let leaf = |f: u32| cpuid.as_slice().iter().find(|e| e.function == f);
    let kvm = leaf(0x4000_0000).is_some_and(|e| {
        // "KVMKVMKVM\0\0\0" in EBX, ECX, EDX.
        (e.ebx, e.ecx, e.edx) == (0x4b4d_564b, 0x564b_4d56, 0x0000_004d)
    });
    kvm && leaf(0x4000_0001).is_some_and(|e| e.eax & (1 << 3) != 0)
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
    fn kvmclock_needs_the_signature_and_clocksource2() {
        let sig = kvm_cpuid_entry2 {
            function: 0x4000_0000,
            ebx: 0x4b4d_564b,
            ecx: 0x564b_4d56,
            edx: 0x4d,
            ..Default::default()
        };
        let feat = |eax: u32| kvm_cpuid_entry2 {
            function: 0x4000_0001,
            eax,
            ..Default::default()
        };
        let ok = CpuId::from_entries(&[sig, feat(1 << 3)]).expect("fits");
        assert!(has_kvmclock(&ok));
        let old = CpuId::from_entries(&[sig, feat(1)]).expect("fits");
        assert!(!has_kvmclock(&old), "only the old kvmclock MSR");
        let other = kvm_cpuid_entry2 { ebx: 0, ..sig };
        let not_kvm = CpuId::from_entries(&[other, feat(1 << 3)]).expect("fits");
        assert!(!has_kvmclock(&not_kvm));
    }

    #[test]
    fn tsc_adjust_bit_is_read_from_leaf_7_subleaf_0() {
        let with = CpuId::from_entries(&[entry(7, 0, 2)]).expect("fits");
        let sub1 = CpuId::from_entries(&[entry(7, 1, 2)]).expect("fits");
        assert!(has_tsc_adjust(&with));
        assert!(!has_tsc_adjust(&sub1));
    }
}
