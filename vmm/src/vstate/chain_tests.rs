//! The chain of rounds with stand-in vCPU threads: order, the ring's
//! bound, pausing without losing a round, and a round that cannot start.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vm_memory::GuestAddress;

use super::*;

/// Records, per round, which round it was and the variant it ran.
struct Log {
    before: Vec<u32>,
}

impl RoundWork for Log {
    type Data = Vec<(u32, Variant)>;
    type Error = String;

    fn before(&mut self, _: &GuestMemoryMmap, round: u32, _: Variant) -> Result<(), String> {
        self.before.push(round);
        if round == 1_000 {
            return Err("round 1000 cannot start".into());
        }
        Ok(())
    }

    fn after(
        &mut self,
        _: &GuestMemoryMmap,
        round: u32,
        variant: Variant,
        data: &mut Self::Data,
    ) -> Result<(), String> {
        data.clear();
        data.push((round, variant));
        Ok(())
    }
}

/// Stand-ins for vCPU threads: each runs a "round" per `Chain` command
/// (counting them from `first`, as the guest does) and reports it.
fn vcpus(
    chain: &Arc<Chain<Log>>,
    n: u32,
    first: u32,
) -> (Vec<JoinHandle<()>>, Vec<Arc<Mailbox<Command>>>) {
    let mut handles = Vec::new();
    let mut boxes = Vec::new();
    for v in 0..n {
        let mailbox = Arc::new(Mailbox::new(Command::Stop));
        let (m, c) = (mailbox.clone(), chain.clone());
        handles.push(std::thread::spawn(move || {
            let (mut last, mut round) = (0, first);
            while let Command::Chain = m.next(&mut last, true) {
                c.arrive(v, round, Ok(TscState::default()));
                round += 1;
            }
        }));
        boxes.push(mailbox);
    }
    let targets = boxes
        .iter()
        .cloned()
        .zip(handles.iter().map(|h| h.thread().clone()))
        .collect();
    chain.connect(targets);
    (handles, boxes)
}

fn stop(handles: Vec<JoinHandle<()>>, boxes: &[Arc<Mailbox<Command>>]) {
    for (m, h) in boxes.iter().zip(&handles) {
        m.post(Command::Stop, h.thread());
    }
    for h in handles {
        h.join().expect("a stand-in vCPU thread ends");
    }
}

fn chain(vcpus: u32) -> Arc<Chain<Log>> {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 4096)])
        .expect("a page of guest memory");
    Arc::new(Chain::new(mem, vcpus, Log { before: Vec::new() }, 1))
}

/// Takes round `round`, polling until it has completed.
fn take_polling(
    c: &Chain<Log>,
    round: u32,
    data: &mut Vec<(u32, Variant)>,
    reports: &mut Vec<Report>,
) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match c.take(round, data, reports) {
            Taken::Round => return Ok(()),
            Taken::Failed(e) => return Err(e),
            Taken::Stuck => return Err(format!("round {round} is stuck")),
            Taken::Pending if Instant::now() < until => std::thread::yield_now(),
            Taken::Pending => return Err(format!("round {round} did not complete")),
        }
    }
}

/// Rounds run back to back, in order, each started once, each with its
/// planned variant and every vCPU's report; the vCPUs never run more
/// than the ring's depth ahead of the coordinator, and a full ring
/// resumes once rounds are taken.
#[test]
fn rounds_run_back_to_back_in_order_within_the_ring() {
    let c = chain(3);
    let (handles, boxes) = vcpus(&c, 3, 1);
    let rounds = 3 * DEPTH;
    let variant = |r: u32| {
        if r % 2 == 0 {
            Variant::XenHead
        } else {
            Variant::Xen415
        }
    };
    for r in 1..=rounds {
        c.plan(variant(r));
    }
    let (mut data, mut reports) = (Vec::new(), Vec::new());
    let mut filled = false;
    for r in 1..=rounds {
        if r == 2 {
            // Let the vCPUs run ahead until the ring is full.
            let until = Instant::now() + Duration::from_secs(30);
            while c.completed() < DEPTH + 2 && Instant::now() < until {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(20));
            filled = c.paused() && c.completed() == DEPTH + 2;
        }
        assert!(c.completed() <= r + DEPTH, "ran past the ring in round {r}");
        take_polling(&c, r, &mut data, &mut reports).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(data, [(r, variant(r))]);
        assert_eq!(reports.len(), 3);
        for report in &reports {
            assert!(matches!(report, Some((n, Ok(_))) if *n == r), "{report:?}");
        }
    }
    assert!(filled, "the ring filled and the chain paused on it");
    assert!(c.paused(), "nothing planned is left");
    let before = c.with_work(|w, _| w.before.clone()).unwrap_or_default();
    assert_eq!(before, (1..=rounds).collect::<Vec<_>>());
    stop(handles, &boxes);
}

/// Closed (or stopped short by an error), the chain starts nothing
/// more, and every round that completed is still taken: nothing
/// measured is lost.
#[test]
fn a_closed_chain_keeps_its_completed_rounds() {
    let c = chain(2);
    let (handles, boxes) = vcpus(&c, 2, 1);
    for _ in 1..=10 {
        c.plan(Variant::XenHead);
    }
    let (mut data, mut reports) = (Vec::new(), Vec::new());
    take_polling(&c, 1, &mut data, &mut reports).unwrap_or_else(|e| panic!("{e}"));
    c.close();
    let until = Instant::now() + Duration::from_secs(30);
    while !c.paused() && Instant::now() < until {
        std::thread::yield_now();
    }
    let completed = c.completed();
    assert!(completed <= 11);
    for r in 2..completed {
        take_polling(&c, r, &mut data, &mut reports).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(data, [(r, Variant::XenHead)]);
    }
    if completed <= 10 {
        assert!(matches!(
            c.take(completed, &mut data, &mut reports),
            Taken::Stuck
        ));
    }
    // Out of order: refused.
    assert!(matches!(c.take(1, &mut data, &mut reports), Taken::Stuck));
    stop(handles, &boxes);
}

/// A round whose preparation fails is reported, and not started.
#[test]
fn a_round_that_cannot_start_is_reported() {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 4096)])
        .expect("a page of guest memory");
    let c = Arc::new(Chain::new(mem, 1, Log { before: Vec::new() }, 999));
    let (handles, boxes) = vcpus(&c, 1, 999);
    c.plan(Variant::XenHead);
    c.plan(Variant::XenHead);
    let (mut data, mut reports) = (Vec::new(), Vec::new());
    take_polling(&c, 999, &mut data, &mut reports).unwrap_or_else(|e| panic!("{e}"));
    let err = take_polling(&c, 1_000, &mut data, &mut reports);
    assert_eq!(err, Err("round 1000 cannot start".to_string()));
    assert_eq!(c.completed(), 1_000, "round 1000 never ran");
    stop(handles, &boxes);
}
