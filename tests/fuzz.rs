//! Property-based fuzzing of everything that reads untrusted bytes: the guest's
//! round records and progress slots, the analysis of records that passed
//! validation, and the guest-image (ELF) checker and loader.
//!
//! Bounded: each property runs a fixed number of cases (`PROPTEST_CASES`
//! overrides it), the whole file in seconds, so CI runs it on every change.

use proptest::prelude::*;
use tsc_contract::{
    layout, progress_word, Progress, RecordError, RoundRecord, Variant, RECORD_MAGIC,
    RECORD_NO_TSC_WRITE, RECORD_SIZE,
};
use tsc_vmm::TscState;
use tsc_vmm::{analyse_round, Base, RoundAccumulator, SkewBasis, VcpuSample};
use tsc_vmm::{check_guest_image as check, load_guest_image as load, EMBEDDED};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        // Deterministic shrinking output is not needed; no persistence files
        // in the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn record_bytes(r: &RoundRecord) -> Vec<u8> {
    let mut b = Vec::with_capacity(RECORD_SIZE);
    for w in [r.magic, r.vcpu, r.round, r.variant, r.flags, r.reserved] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for w in [
        r.tsc_first,
        r.written,
        r.tsc_before_write,
        r.tsc_after_loop,
        r.adjust_before,
        r.adjust_after,
    ] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b
}

/// The contract's rules for a record, transcribed here from their
/// documentation (`RoundRecord`, `RECORD_*`, `RecordError`), independently
/// of `RoundRecord::validate`: the identity (magic, vCPU, round, variant),
/// only known flag bits and a zero reserved field, the kind of record the
/// variant gives (Xen's TSC rendezvous 1..=4 writes a common value; the std
/// rendezvous 5 and Linux's sync 6 do not, and only 6 has a sync result),
/// then the TSC values (no write: `written` and `tsc_before_write` are 0; a
/// write: neither below the first-iteration TSC).
fn valid_by_the_contract(r: &RoundRecord, vcpu: u32, round: u32, variant: u32) -> bool {
    const HAS_ADJUST: u32 = 1;
    const NO_WRITE: u32 = 2;
    const SYNC: u32 = 4;
    let writes = (1..=4).contains(&variant);
    let sync = variant == 6;
    r.magic == 0x4443_5254
        && r.vcpu == vcpu
        && r.round == round
        && r.variant == variant
        && r.flags & !(HAS_ADJUST | NO_WRITE | SYNC) == 0
        && r.reserved == 0
        && (r.flags & NO_WRITE == 0) == writes
        && (r.flags & SYNC != 0) == sync
        && if writes {
            r.written >= r.tsc_first && r.tsc_before_write >= r.tsc_first
        } else {
            r.written == 0 && r.tsc_before_write == 0
        }
}

/// Records that are mostly plausible, with every field free to be anything:
/// the magic and identifying fields are right often enough to reach the
/// value checks.
fn any_record() -> impl Strategy<Value = RoundRecord> {
    (
        prop_oneof![Just(RECORD_MAGIC), any::<u32>()],
        0u32..4,
        0u32..4,
        prop_oneof![1u32..=6, any::<u32>()],
        prop_oneof![0u32..8, any::<u32>()],
        prop_oneof![Just(0u32), any::<u32>()],
        any::<[u64; 6]>(),
        any::<bool>(),
    )
        .prop_map(
            |(magic, vcpu, round, variant, flags, reserved, mut v, no_write)| {
                // Records without a write: their zeros, often enough to
                // reach the rules behind them.
                if no_write {
                    (v[1], v[2]) = (0, 0);
                }
                RoundRecord {
                    magic,
                    vcpu,
                    round,
                    variant,
                    flags,
                    reserved,
                    tsc_first: v[0],
                    written: v[1],
                    tsc_before_write: v[2],
                    tsc_after_loop: v[3],
                    adjust_before: v[4],
                    adjust_after: v[5],
                }
            },
        )
}

fn any_state() -> impl Strategy<Value = TscState> {
    (
        any::<[u64; 4]>(),
        proptest::option::of(any::<u64>()),
        any::<u32>(),
        (prop_oneof![Just(0u32), any::<u32>()], any::<bool>()),
    )
        .prop_map(|(v, offset, tsc_khz, (host_khz, scaled))| TscState {
            adjust: v[0],
            tsc: v[1],
            host_before: v[2],
            host_after: v[3],
            offset,
            tsc_khz,
            host_khz,
            scaled,
        })
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn record_decoding_never_panics_and_needs_a_whole_record(
        bytes in proptest::collection::vec(any::<u8>(), 0..2 * RECORD_SIZE),
        vcpu in 0u32..4, round in 0u32..4, variant in 0u32..5,
    ) {
        let decoded = RoundRecord::from_bytes(&bytes);
        prop_assert_eq!(decoded.is_some(), bytes.len() >= RECORD_SIZE);
        if let Some(r) = decoded {
            prop_assert_eq!(&record_bytes(&r)[..], &bytes[..RECORD_SIZE]);
            prop_assert_eq!(
                r.validate(vcpu, round, variant).is_ok(),
                valid_by_the_contract(&r, vcpu, round, variant)
            );
        }
    }

    /// A record validates exactly when the contract's rules say it must,
    /// and a refusal names the first rule broken.
    #[test]
    fn a_record_validates_exactly_when_the_contract_says(
        r in any_record(), vcpu in 0u32..4, round in 0u32..4, variant in 1u32..=6,
    ) {
        let decoded = RoundRecord::from_bytes(&record_bytes(&r));
        prop_assert_eq!(decoded, Some(r));
        let got = r.validate(vcpu, round, variant);
        prop_assert_eq!(got.is_ok(), valid_by_the_contract(&r, vcpu, round, variant));
        match got {
            Ok(()) => {}
            Err(RecordError::BadMagic(m)) => prop_assert_ne!(m, RECORD_MAGIC),
            Err(RecordError::WrongVcpu { expected, found }) => {
                prop_assert_eq!(r.magic, RECORD_MAGIC);
                prop_assert_eq!((expected, found), (vcpu, r.vcpu));
                prop_assert_ne!(found, expected);
            }
            Err(RecordError::WrongRound { expected, found }) => {
                prop_assert_eq!(r.vcpu, vcpu);
                prop_assert_eq!((expected, found), (round, r.round));
                prop_assert_ne!(found, expected);
            }
            Err(RecordError::WrongVariant { expected, found }) => {
                prop_assert_eq!((r.vcpu, r.round), (vcpu, round));
                prop_assert_eq!((expected, found), (variant, r.variant));
                prop_assert_ne!(found, expected);
            }
            Err(e) => {
                // A rule about the content: the identity was right.
                prop_assert_eq!((r.magic, r.vcpu, r.round, r.variant), (RECORD_MAGIC, vcpu, round, variant));
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }

    #[test]
    fn progress_slots_decode_within_range(word in any::<u64>(), rounds in 0u32..10) {
        match Progress::decode(word, rounds) {
            Progress::NotStarted => prop_assert_eq!(word, 0),
            Progress::At { round, iteration } => {
                prop_assert!(round < rounds);
                prop_assert!(iteration <= tsc_contract::PROGRESS_PAST_LOOP);
                prop_assert_eq!(progress_word(round, iteration), word);
            }
            Progress::Invalid(w) => prop_assert_eq!(w, word),
        }
    }

    /// The analysis takes records that passed validation and KVM readings;
    /// no combination of values may make it panic (overflow included).
    #[test]
    fn the_analysis_never_panics_on_validated_records(
        recs in proptest::collection::vec((any_record(), any_state(), any_state()), 1..5),
        rel in proptest::collection::vec(proptest::option::of(any::<i64>()), 5),
        no_write in any::<bool>(),
    ) {
        let n = recs.len();
        // Both kinds of record: a common TSC write, or none (xen-std).
        let variant = if no_write { Variant::XenStd } else { Variant::XenHead };
        let samples: Vec<VcpuSample> = recs
            .into_iter()
            .enumerate()
            .map(|(i, (mut record, before, after))| {
                record.magic = RECORD_MAGIC;
                record.vcpu = i as u32;
                record.round = 0;
                record.variant = variant as u32;
                record.flags &= 1;
                record.reserved = 0;
                if no_write {
                    record.flags |= RECORD_NO_TSC_WRITE;
                    record.written = 0;
                    record.tsc_before_write = 0;
                } else {
                    record.written = record.written.max(record.tsc_first);
                    record.tsc_before_write = record.tsc_before_write.max(record.tsc_first);
                }
                VcpuSample { record, before, after }
            })
            .collect();
        for s in &samples {
            prop_assert!(s.record.validate(s.record.vcpu, 0, variant as u32).is_ok());
        }
        let r = analyse_round(0, "xen-head", &samples, &Base::creation(n), None);
        prop_assert_eq!(r.vcpus.len(), n);
        // Any base, known or not, from any history.
        let base = Base { rel: rel[..n].to_vec(), basis: SkewBasis::Assumed };
        let r = analyse_round(0, "xen-head", &samples, &base, None);
        prop_assert_eq!(r.vcpus.len(), n);
        // The accumulator over two rounds, from the "before" states.
        let before: Vec<_> = samples.iter().map(|s| s.before).collect();
        let after: Vec<_> = samples.iter().map(|s| s.after).collect();
        let records: Vec<_> = samples.iter().map(|s| s.record).collect();
        let mut acc = RoundAccumulator::new(&before);
        acc.add(0, variant, &records, &after, None);
        let again: Vec<_> = records.iter().map(|r| RoundRecord { round: 1, ..*r }).collect();
        prop_assert_eq!(acc.add(1, variant, &again, &before, None).vcpus.len(), n);
    }

    /// The real guest with its header and program-header fields set to
    /// values chosen to sit on the rules' edges (or anything): the parser
    /// behind the magic is reached every time, and it accepts exactly the
    /// images the documented rules accept, with their entry point.
    #[test]
    fn the_elf_checker_accepts_exactly_the_images_the_rules_allow(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), elf_value()), 1..5),
    ) {
        let fields = elf_fields(EMBEDDED);
        let mut image = EMBEDDED.to_vec();
        for (which, value) in &edits {
            let (offset, width) = fields[which.index(fields.len())];
            let v = value.resolve(&image, offset, width);
            image[offset..offset + width].copy_from_slice(&v.to_le_bytes()[..width]);
        }
        prop_assert_eq!(check(&image).ok(), reference_check(&image));
    }
}

/// The ELF rules the README and the checker's errors state, transcribed
/// here: an ELF, 64-bit little-endian x86-64, an executable (not ET_DYN),
/// 56-byte program headers inside the file, and every PT_LOAD segment with
/// no more file than memory size, its data inside the file and its memory
/// inside the image area 0x100000..0x200000; at least one such segment,
/// and the entry point inside an executable one. Returns the entry point.
fn reference_check(img: &[u8]) -> Option<u64> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(img.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(img.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(img.get(o..o + 8)?.try_into().ok()?));
    if img.len() < 64 || &img[..4] != b"\x7fELF" || img[4] != 2 || img[5] != 1 {
        return None;
    }
    if u16_at(18)? != 62 || u16_at(16)? != 2 || u16_at(54)? != 56 {
        return None;
    }
    let entry = u64_at(24)?;
    let (phoff, phnum) = (u64_at(32)?, u64::from(u16_at(56)?));
    if phoff.checked_add(phnum * 56)? > img.len() as u64 {
        return None;
    }
    let (mut loads, mut entry_ok) = (0, false);
    for i in 0..phnum {
        let o = usize::try_from(phoff + i * 56).ok()?;
        if u32_at(o)? != 1 {
            continue;
        }
        let (flags, offset, paddr) = (u32_at(o + 4)?, u64_at(o + 8)?, u64_at(o + 24)?);
        let (filesz, memsz) = (u64_at(o + 32)?, u64_at(o + 40)?);
        let mem_end = paddr.checked_add(memsz)?;
        if filesz > memsz
            || paddr < 0x10_0000
            || mem_end > 0x20_0000
            || offset.checked_add(filesz)? > img.len() as u64
        {
            return None;
        }
        loads += 1;
        entry_ok |= flags & 1 != 0 && (paddr..mem_end).contains(&entry);
    }
    (loads > 0 && entry_ok).then_some(entry)
}

/// (offset, width) of every ELF header and program header field the
/// checker or the loader could read, in the image `elf`.
fn elf_fields(elf: &[u8]) -> Vec<(usize, usize)> {
    let mut f = vec![
        (0, 1),
        (4, 1),
        (5, 1),
        (16, 2),
        (18, 2),
        (24, 8),
        (32, 8),
        (54, 2),
        (56, 2),
    ];
    let phoff = u64::from_le_bytes(elf[32..40].try_into().expect("8 bytes")) as usize;
    let phnum = usize::from(u16::from_le_bytes([elf[56], elf[57]]));
    for i in 0..phnum {
        let o = phoff + i * 56;
        for (off, width) in [(0, 4), (4, 4), (8, 8), (16, 8), (24, 8), (32, 8), (40, 8)] {
            f.push((o + off, width));
        }
    }
    f
}

/// A new value for a field: on the rules' edges, near the old value, or
/// anything.
#[derive(Clone, Debug)]
enum ElfValue {
    Fixed(u64),
    NearOld(i64),
    NearLen(i64),
}

impl ElfValue {
    fn resolve(&self, image: &[u8], offset: usize, width: usize) -> u64 {
        match *self {
            ElfValue::Fixed(v) => v,
            ElfValue::NearOld(d) => {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(&image[offset..offset + width]);
                u64::from_le_bytes(b).wrapping_add_signed(d)
            }
            ElfValue::NearLen(d) => (image.len() as u64).wrapping_add_signed(d),
        }
    }
}

fn elf_value() -> impl Strategy<Value = ElfValue> {
    let edges = [
        0u64,
        1,
        2,
        3,
        56,
        62,
        layout::IMAGE - 1,
        layout::IMAGE,
        layout::IMAGE + 1,
        layout::IMAGE_END - 1,
        layout::IMAGE_END,
        layout::IMAGE_END + 1,
        u64::MAX,
        u64::MAX - 55,
    ];
    prop_oneof![
        proptest::sample::select(edges.to_vec()).prop_map(ElfValue::Fixed),
        (-64i64..64).prop_map(ElfValue::NearOld),
        (-64i64..64).prop_map(ElfValue::NearLen),
        any::<u64>().prop_map(ElfValue::Fixed),
    ]
}

/// Every truncation of the real guest, exhaustively: accepted exactly when
/// it still holds the ELF header, the program headers and every loadable
/// segment's data (computed here from the headers), and then with the same
/// entry point.
#[test]
fn a_truncated_guest_is_refused_exactly_when_it_lacks_what_is_loaded() {
    let u64_at = |o: usize| u64::from_le_bytes(EMBEDDED[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_le_bytes(EMBEDDED[o..o + 4].try_into().expect("4 bytes"));
    let phoff = u64_at(32) as usize;
    let phnum = usize::from(u16::from_le_bytes([EMBEDDED[56], EMBEDDED[57]]));
    let mut needed = (64).max(phoff + phnum * 56);
    for o in (0..phnum).map(|i| phoff + i * 56) {
        if u32_at(o) == 1 {
            needed = needed.max((u64_at(o + 8) + u64_at(o + 32)) as usize);
        }
    }
    let entry = check(EMBEDDED).expect("the real guest passes");
    assert!(needed <= EMBEDDED.len());
    for len in 0..=EMBEDDED.len() {
        let got = check(&EMBEDDED[..len]);
        if len >= needed {
            assert_eq!(
                got,
                Ok(entry),
                "a truncation to {len} bytes keeps everything loaded"
            );
        } else {
            assert!(
                got.is_err(),
                "a truncation to {len} of {needed} needed bytes was accepted"
            );
        }
    }
}

proptest! {
    // Each accepted image is loaded into a fresh 16 MiB guest memory: fewer cases.
    #![proptest_config(config(300))]

    /// Mutations of the real guest's header fields (as above) and of any
    /// byte: whatever the checker accepts loads without panicking, at the
    /// entry the checker named, and writes nothing outside the image area.
    #[test]
    fn mutated_guests_are_refused_or_load_inside_the_image_area(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), elf_value()), 0..4),
        bytes in proptest::collection::vec((0usize..EMBEDDED.len(), any::<u8>()), 0..3),
    ) {
        let fields = elf_fields(EMBEDDED);
        let mut image = EMBEDDED.to_vec();
        for (which, value) in &edits {
            let (offset, width) = fields[which.index(fields.len())];
            let v = value.resolve(&image, offset, width);
            image[offset..offset + width].copy_from_slice(&v.to_le_bytes()[..width]);
        }
        for (pos, b) in bytes {
            image[pos] = b;
        }
        if let Ok(entry) = check(&image) {
            prop_assert!((layout::IMAGE..layout::IMAGE_END).contains(&entry));
            let mem = GuestMemoryMmap::<()>::from_ranges(&[(
                GuestAddress(0),
                layout::MEM_SIZE as usize,
            )])
            .expect("guest memory");
            if let Ok(e) = load(&mem, &image) {
                prop_assert_eq!(e, entry);
            }
            // Guest memory starts zeroed: outside the image area it must
            // still be.
            let mut chunk = vec![0u8; 1 << 20];
            let zeros = vec![0u8; 1 << 20];
            for start in (0..layout::MEM_SIZE).step_by(1 << 20) {
                let end = start + (1 << 20);
                if start < layout::IMAGE_END && layout::IMAGE < end {
                    let below = (layout::IMAGE.saturating_sub(start)) as usize;
                    let above = end.saturating_sub(layout::IMAGE_END) as usize;
                    mem.read_slice(&mut chunk, GuestAddress(start)).expect("read");
                    prop_assert!(chunk[..below].iter().all(|&b| b == 0));
                    prop_assert!(chunk[chunk.len() - above..].iter().all(|&b| b == 0));
                    continue;
                }
                mem.read_slice(&mut chunk, GuestAddress(start)).expect("read");
                prop_assert!(chunk == zeros, "written outside the image area at {start:#x}..{end:#x}");
            }
        }
    }
}

#[test]
fn the_real_guest_passes() {
    assert!(check(EMBEDDED).is_ok());
}
