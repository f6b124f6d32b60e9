//! One round on one host thread, and its record in the form the KVM path
//! reads it: the [`RoundRecord`] the guest would write (the same fields,
//! flags and TSC reads as `one_round` in the guest). Linux's results go
//! through [`super::staging`].

use tsc_contract::{
    progress_word, RoundRecord, Variant, PROGRESS_PAST_LOOP, RECORD_HAS_TSC_ADJUST, RECORD_MAGIC,
    RECORD_NO_TSC_WRITE, RECORD_SYNC_RESULT,
};
use tsc_sync::{linux_tsc_sync, Cpu, LinuxParams, LinuxSyncResult, Readings, XenAlgorithm};

use super::cpu::ThreadCpu;
use super::shared::RoundShared;

/// What one thread's round produced.
#[derive(Debug, Clone, Copy)]
pub struct RoundOutput {
    /// The record, as the guest writes it.
    pub record: RoundRecord,
    /// Linux's result (`None` for the other variants).
    pub sync: Option<LinuxSyncResult>,
}

/// Runs round `round` of `variant` as thread `index` of `vcpus`: the variant
/// unchanged on this thread's CPU, TSC_ADJUST read before and after (outside
/// the timed part), as the guest does it.
pub fn one_round(
    cpu: &mut ThreadCpu<'_>,
    index: u32,
    vcpus: u32,
    round: u32,
    variant: Variant,
    shared: &RoundShared,
    params: LinuxParams,
) -> RoundOutput {
    cpu.set_round(round);
    let adjust_before = cpu.tsc_adjust();
    let (out, kind, sync) = match XenAlgorithm::for_variant(variant) {
        Some(alg) => {
            let r = alg.run(&shared.xen, index, vcpus, cpu);
            (r, if r.wrote { 0 } else { RECORD_NO_TSC_WRITE }, None)
        }
        None => {
            let start = cpu.rdtsc_ordered();
            let result = linux_tsc_sync(&shared.linux, index, vcpus, params, cpu);
            let end = cpu.rdtsc_ordered();
            let r = Readings {
                tsc_first: start,
                tsc_after_loop: end,
                ..Readings::default()
            };
            (r, RECORD_NO_TSC_WRITE | RECORD_SYNC_RESULT, Some(result))
        }
    };
    cpu.publish(progress_word(round, PROGRESS_PAST_LOOP));
    RoundOutput {
        record: RoundRecord {
            magic: RECORD_MAGIC,
            vcpu: index,
            round,
            variant: variant as u32,
            flags: kind | RECORD_HAS_TSC_ADJUST,
            reserved: 0,
            tsc_first: out.tsc_first,
            written: out.written,
            tsc_before_write: out.tsc_before_write,
            tsc_after_loop: out.tsc_after_loop,
            adjust_before,
            adjust_after: cpu.tsc_adjust(),
        },
        sync,
    }
}
