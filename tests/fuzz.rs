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
use tsc_vmm::analysis::{analyse_round, Base, RoundAccumulator, SkewBasis, VcpuSample};
use tsc_vmm::guest_image::{check, load, EMBEDDED};
use tsc_vmm::tsc::TscState;
use vm_memory::{GuestAddress, GuestMemoryMmap};

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

/// Records that are mostly plausible, with every field free to be anything:
/// the magic and identifying fields are right often enough to reach the
/// value checks.
fn any_record() -> impl Strategy<Value = RoundRecord> {
    (
        prop_oneof![Just(RECORD_MAGIC), any::<u32>()],
        0u32..4,
        0u32..4,
        prop_oneof![1u32..=3, any::<u32>()],
        prop_oneof![Just(0u32), Just(1u32), any::<u32>()],
        prop_oneof![Just(0u32), any::<u32>()],
        any::<[u64; 6]>(),
    )
        .prop_map(
            |(magic, vcpu, round, variant, flags, reserved, v)| RoundRecord {
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
            },
        )
}

fn any_state() -> impl Strategy<Value = TscState> {
    (
        any::<[u64; 4]>(),
        proptest::option::of(any::<u64>()),
        any::<u32>(),
    )
        .prop_map(|(v, offset, tsc_khz)| TscState {
            adjust: v[0],
            tsc: v[1],
            host_before: v[2],
            host_after: v[3],
            offset,
            tsc_khz,
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
            let _ = r.validate(vcpu, round, variant);
        }
    }

    #[test]
    fn a_record_that_validates_is_consistent(
        r in any_record(), vcpu in 0u32..4, round in 0u32..4, variant in 1u32..=3,
    ) {
        let decoded = RoundRecord::from_bytes(&record_bytes(&r));
        prop_assert_eq!(decoded, Some(r));
        match r.validate(vcpu, round, variant) {
            Ok(()) => {
                prop_assert_eq!(r.magic, RECORD_MAGIC);
                prop_assert_eq!((r.vcpu, r.round, r.variant), (vcpu, round, variant));
                prop_assert!(r.written >= r.tsc_first);
                prop_assert!(r.tsc_before_write >= r.tsc_first);
                prop_assert_eq!(r.reserved, 0);
            }
            Err(RecordError::BadMagic(m)) => prop_assert_ne!(m, RECORD_MAGIC),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
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

    #[test]
    fn the_elf_checker_never_panics_on_garbage(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        if let Ok(entry) = check(&bytes) {
            prop_assert!((layout::IMAGE..layout::IMAGE_END).contains(&entry));
        }
    }

    #[test]
    fn the_elf_checker_never_panics_on_truncations(len in 0usize..EMBEDDED.len()) {
        prop_assert!(check(&EMBEDDED[..len]).is_err() || len >= 64);
    }
}

proptest! {
    // Each accepted image is loaded into a fresh 16 MiB guest memory: fewer cases.
    #![proptest_config(config(300))]

    /// Mutations of the real guest (headers mostly, where they matter): the
    /// checker never panics, and whatever it accepts loads inside the image
    /// area without panicking.
    #[test]
    fn mutated_guests_are_refused_or_load_inside_the_image_area(
        edits in proptest::collection::vec((0usize..256, any::<u8>()), 1..6),
        tail in proptest::collection::vec((0usize..EMBEDDED.len(), any::<u8>()), 0..3),
    ) {
        let mut image = EMBEDDED.to_vec();
        for (pos, b) in edits.into_iter().chain(tail) {
            if let Some(x) = image.get_mut(pos) {
                *x = b;
            }
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
        }
    }
}

#[test]
fn the_real_guest_passes() {
    assert!(check(EMBEDDED).is_ok());
}
