//! Identity page tables: PML4 -> one PDPT -> one PD of 2 MiB pages, mapping
//! the first GiB of guest physical memory at the same virtual addresses.

/// Present | writable.
const PRESENT_RW: u64 = 0x3;
/// Present | writable | page size (2 MiB).
const LARGE_PAGE: u64 = 0x83;
/// Entries in one table.
pub const ENTRIES: usize = 512;

/// The three tables, each 512 entries, to be written at `pml4`, `pdpt` and `pd`.
#[derive(Debug, PartialEq, Eq)]
pub struct IdentityTables {
    /// PML4: entry 0 points at the PDPT.
    pub pml4: [u64; ENTRIES],
    /// PDPT: entry 0 points at the PD.
    pub pdpt: [u64; ENTRIES],
    /// PD: entry i maps `i * 2 MiB`.
    pub pd: [u64; ENTRIES],
}

/// Builds identity tables for a PDPT at `pdpt_addr` and a PD at `pd_addr`.
pub fn identity_tables(pdpt_addr: u64, pd_addr: u64) -> IdentityTables {
    let mut t = IdentityTables {
        pml4: [0; ENTRIES],
        pdpt: [0; ENTRIES],
        pd: [0; ENTRIES],
    };
    t.pml4[0] = pdpt_addr | PRESENT_RW;
    t.pdpt[0] = pd_addr | PRESENT_RW;
    for (i, e) in t.pd.iter_mut().enumerate() {
        *e = ((i as u64) << 21) | LARGE_PAGE;
    }
    t
}

#[cfg(test)]
/// Walks the tables for `vaddr` the way the MMU does; `None` when unmapped.
pub fn translate(t: &IdentityTables, pdpt_addr: u64, pd_addr: u64, vaddr: u64) -> Option<u64> {
    let pml4e = t.pml4[((vaddr >> 39) & 0x1ff) as usize];
    if pml4e & 1 == 0 || pml4e & !0xfff != pdpt_addr {
        return None;
    }
    let pdpte = t.pdpt[((vaddr >> 30) & 0x1ff) as usize];
    if pdpte & 1 == 0 || pdpte & !0xfff != pd_addr {
        return None;
    }
    let pde = t.pd[((vaddr >> 21) & 0x1ff) as usize];
    if pde & 1 == 0 || pde & 0x80 == 0 {
        return None;
    }
    Some((pde & !0x1f_ffff & 0x000f_ffff_ffff_f000) | (vaddr & 0x1f_ffff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_have_the_expected_encoding() {
        let t = identity_tables(0x4000, 0x5000);
        assert_eq!(t.pml4[0], 0x4003);
        assert_eq!(t.pdpt[0], 0x5003);
        assert_eq!(t.pd[0], 0x83);
        assert_eq!(t.pd[1], 0x20_0083);
        assert_eq!(t.pd[511], 0x3fe0_0083);
        assert!(t.pml4[1..].iter().all(|&e| e == 0));
    }

    #[test]
    fn the_first_gib_is_identity_mapped_and_nothing_else() {
        let t = identity_tables(0x4000, 0x5000);
        for addr in [0u64, 0xfff, 0x10_0000, 0x1f_ffff, 0x20_0000, 0x3fff_ffff] {
            assert_eq!(translate(&t, 0x4000, 0x5000, addr), Some(addr));
        }
        assert_eq!(translate(&t, 0x4000, 0x5000, 0x4000_0000), None);
        assert_eq!(translate(&t, 0x4000, 0x5000, 1 << 39), None);
    }
}
