//! The round loop against a stand-in backend that looks ahead: every
//! variant is planned in order before its round and never further ahead
//! than the backend asked, and a schedule whose time is up ends on its
//! boundary with every round it drew run.

use std::time::Duration;

use tsc_contract::{RoundRecord, Variant, RECORD_MAGIC};

use super::*;
use crate::host::VmFacts;
use crate::run::Listed;
use crate::tsc::OffsetSource;

/// Two CPUs whose rounds always succeed, recording what it was asked.
struct Fake {
    ahead: u32,
    /// Every variant planned, in order.
    planned: Vec<Variant>,
    /// Every round run: its number, its variant, how many were planned then.
    ran: Vec<(u32, Variant, usize)>,
}

fn state() -> TscState {
    TscState {
        tsc_khz: 1_000_000,
        offset: Some(0),
        ..TscState::default()
    }
}

impl Backend for Fake {
    fn vcpus(&self) -> u32 {
        2
    }

    fn readback(&mut self, _: u32, out: &mut Vec<TscState>) -> Result<(), RunError> {
        out.clear();
        out.resize(2, state());
        Ok(())
    }

    fn run_round(
        &mut self,
        round: u32,
        variant: Variant,
        data: &mut RoundData,
    ) -> Result<(), RunError> {
        self.ran.push((round, variant, self.planned.len()));
        data.records.clear();
        for vcpu in 0..2 {
            data.records.push(RoundRecord {
                magic: RECORD_MAGIC,
                vcpu,
                round,
                variant: variant as u32,
                tsc_first: 100,
                tsc_before_write: 150,
                written: 200,
                tsc_after_loop: 300,
                ..RoundRecord::default()
            });
        }
        data.after.clear();
        data.after.resize(2, state());
        data.sync = None;
        Ok(())
    }

    fn lookahead(&self) -> u32 {
        self.ahead
    }

    fn plan(&mut self, variant: Variant) {
        self.planned.push(variant);
    }

    fn rearm(&mut self, _: Duration) {}

    fn host(&self, _: &[TscState]) -> HostInfo {
        HostInfo::collect(VmFacts {
            tsc_khz: Some(1_000_000),
            tsc_offset_attr: false,
            offset_source: OffsetSource::None,
            guest_tsc_adjust: false,
            host_tsc_khz: None,
            guest_tsc: None,
        })
    }

    fn skew_set_by(&self) -> &'static str {
        "the stand-in"
    }

    fn unequal_start(&self, _: Option<u64>, _: Option<u64>) -> String {
        String::new()
    }
}

const WRITERS: [Variant; 4] = [
    Variant::Xen415,
    Variant::XenHead,
    Variant::XenRfcV3,
    Variant::Xen6ca022a1,
];

fn drive_fake(ahead: u32, schedule: &mut dyn Schedule) -> (Fake, Vec<u32>) {
    let mut fake = Fake {
        ahead,
        planned: Vec::new(),
        ran: Vec::new(),
    };
    let first = schedule.next_variant();
    let mut handed = Vec::new();
    drive(
        &mut fake,
        &RunOptions::default(),
        first,
        schedule,
        &mut |r| {
            handed.push(r.round);
            Ok(())
        },
    )
    .unwrap_or_else(|f| panic!("{f}"));
    (fake, handed)
}

#[test]
fn every_variant_is_planned_in_order_before_its_round_and_no_further_ahead() {
    let list: Vec<Variant> = (0..10).map(|k| WRITERS[k % 4]).collect();
    for ahead in [0, 1, 3, 32] {
        let (fake, handed) = drive_fake(ahead, &mut Listed::new(&list));
        assert_eq!(handed, (0..10).collect::<Vec<_>>(), "ahead {ahead}");
        let ran: Vec<Variant> = fake.ran.iter().map(|&(_, v, _)| v).collect();
        assert_eq!(ran, list, "every round ran its variant (ahead {ahead})");
        assert_eq!(fake.planned, list[1..], "each after the first is planned");
        for &(round, _, planned) in &fake.ran {
            // Rounds 1..=planned are planned when `round` runs.
            let want = (round + ahead).min(9) as usize;
            assert_eq!(
                planned,
                want.max(round as usize),
                "ahead {ahead}, round {round}"
            );
        }
    }
}

/// A schedule whose time is up and which may end only on a boundary of
/// `block` rounds (as `compare`'s blocks), from `min` rounds on.
struct Blocks {
    block: u32,
    min: u32,
}

impl Schedule for Blocks {
    fn max_rounds(&self) -> u32 {
        1_000
    }

    fn next_variant(&mut self) -> Variant {
        Variant::XenHead
    }

    fn ends_after(&self, completed: u32) -> bool {
        completed >= self.min && completed % self.block == 0
    }
}

#[test]
fn a_schedule_whose_time_is_up_ends_on_its_boundary_with_every_drawn_round_run() {
    for ahead in [0, 3, 32] {
        for (block, min, rounds) in [(4, 4, 4), (4, 5, 8), (5, 1, 5)] {
            let (fake, handed) = drive_fake(ahead, &mut Blocks { block, min });
            assert_eq!(
                handed,
                (0..rounds).collect::<Vec<_>>(),
                "ahead {ahead}, blocks of {block} from {min}"
            );
            assert_eq!(
                fake.planned.len() as u32 + 1,
                rounds,
                "every round drawn ran (ahead {ahead})"
            );
        }
    }
}
