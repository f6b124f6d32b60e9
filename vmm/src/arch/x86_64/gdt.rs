//! The guest's GDT: null, one 64-bit code and one data segment.

use kvm_bindings::kvm_segment;

/// Selector of the code segment.
pub const CODE_SELECTOR: u16 = 0x08;
/// Selector of the data segment.
pub const DATA_SELECTOR: u16 = 0x10;

/// Builds a segment descriptor from its flags (the high nibble of byte 6 and
/// the access byte, as `0xFAA`), base and limit.
pub const fn descriptor(flags: u16, base: u32, limit: u32) -> u64 {
    ((base as u64 & 0xff00_0000) << 32)
        | ((flags as u64 & 0xf0ff) << 40)
        | ((limit as u64 & 0x000f_0000) << 32)
        | ((base as u64 & 0x00ff_ffff) << 16)
        | (limit as u64 & 0x0000_ffff)
}

/// The table: null, code (long mode, present, ring 0, execute/read), data
/// (present, ring 0, read/write, 4 KiB granular).
pub const GDT: [u64; 3] = [
    0,
    descriptor(0xa09b, 0, 0xfffff),
    descriptor(0xc093, 0, 0xfffff),
];

/// Decodes the descriptor at `selector` into the segment KVM loads.
pub fn segment(table: &[u64], selector: u16) -> kvm_segment {
    let index = usize::from(selector >> 3);
    let d = table.get(index).copied().unwrap_or(0);
    let limit = ((d & 0xffff) | ((d >> 32) & 0xf_0000)) as u32;
    let granular = (d >> 55) & 1 == 1;
    kvm_segment {
        base: ((d >> 16) & 0xff_ffff) | (((d >> 56) & 0xff) << 24),
        limit: if granular {
            (limit << 12) | 0xfff
        } else {
            limit
        },
        selector,
        type_: ((d >> 40) & 0xf) as u8,
        present: ((d >> 47) & 1) as u8,
        dpl: ((d >> 45) & 3) as u8,
        db: ((d >> 54) & 1) as u8,
        s: ((d >> 44) & 1) as u8,
        l: ((d >> 53) & 1) as u8,
        g: granular as u8,
        avl: ((d >> 52) & 1) as u8,
        unusable: u8::from((d >> 47) & 1 == 0),
        padding: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_the_architectural_values() {
        assert_eq!(GDT[1], 0x00af_9b00_0000_ffff);
        assert_eq!(GDT[2], 0x00cf_9300_0000_ffff);
    }

    #[test]
    fn code_segment_decodes_as_64_bit_ring_0() {
        let cs = segment(&GDT, CODE_SELECTOR);
        assert_eq!((cs.l, cs.db, cs.dpl, cs.present, cs.s), (1, 0, 0, 1, 1));
        assert_eq!(cs.type_, 0xb);
        assert_eq!(cs.limit, 0xffff_ffff);
        assert_eq!(cs.base, 0);
        assert_eq!(cs.unusable, 0);
    }

    #[test]
    fn data_segment_decodes_as_writable_and_big() {
        let ds = segment(&GDT, DATA_SELECTOR);
        assert_eq!((ds.l, ds.db, ds.g, ds.type_), (0, 1, 1, 0x3));
        assert_eq!(ds.selector, DATA_SELECTOR);
    }

    #[test]
    fn a_selector_past_the_table_is_unusable() {
        assert_eq!(segment(&GDT, 0x40).unusable, 1);
    }

    #[test]
    fn base_and_limit_are_split_across_the_descriptor() {
        let d = descriptor(0xc093, 0x1234_5678, 0xabcde);
        assert_eq!(d, 0x12ca_9334_5678_bcde);
        let seg = segment(&[0, d], 0x08);
        assert_eq!(seg.base, 0x1234_5678);
        assert_eq!(seg.limit, 0xabcd_efff);
    }
}
