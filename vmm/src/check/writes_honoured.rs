//! Check 4, `writes-honoured`: after the rendezvous the guest's TSCs read the
//! written value plus elapsed time (KVM's evidence, the guest's own, and a
//! later guest read judged against host time).

use crate::tsc::frequency::Ratio;
use serde_json::json;

use super::evidence::{Check, Context, Evidence};
use super::judge::context;
use super::report::{Finding, Verdict};
use super::tally::RoundTally;
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::units::fmt_int as n;

/// Check 4.
pub struct WritesHonoured;

impl Check for WritesHonoured {
    fn number(&self) -> u32 {
        4
    }
    fn id(&self) -> &'static str {
        "writes-honoured"
    }
    fn title(&self) -> &'static str {
        "after the rendezvous the guest's TSCs read the written value plus elapsed time"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        let Some(later) = &ev.later_read else {
            return Ok(super::judge::missing("later guest TSC read"));
        };
        let reads: Vec<(Read, Read)> = ev
            .initial
            .iter()
            .zip(&later.tsc)
            .map(|(s, &tsc)| {
                let first = Read {
                    tsc: s.tsc,
                    host_before: s.host_before,
                    host_after: s.host_after,
                    ratio: s.ratio(),
                };
                let last = Read {
                    tsc,
                    host_before: later.host_before,
                    host_after: later.host_after,
                    ratio: s.ratio(),
                };
                (first, last)
            })
            .collect();
        Ok(judge(
            &ev.tally,
            &reads,
            later.host_elapsed,
            ev.env.host.kvm_flavor,
        ))
    }
}

/// A vCPU's TSC as the guest sees it, with the host TSC just before and just
/// after the read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Read {
    /// The guest's TSC.
    pub tsc: u64,
    /// The host's TSC just before.
    pub host_before: u64,
    /// The host's TSC just after.
    pub host_after: u64,
    /// How the guest's TSC runs against the host's (a host interval enters
    /// the guest's cycles multiplied by it).
    #[serde(skip)]
    pub ratio: Ratio,
}

/// What a later read says about a vCPU's writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadSays {
    /// The guest's TSC moved against the host's by what the writes asked,
    /// and not by 0.
    Honoured,
    /// It moved by 0 (within the brackets), not by what they asked.
    Ignored,
    /// By neither: not the written value plus the elapsed time.
    Neither,
    /// The brackets hold both: the read cannot tell.
    CannotTell,
}

/// One vCPU's later read, judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReadFinding {
    /// How far the guest's TSC moved against the host's from the first read
    /// to the later one: the lowest and highest the brackets allow.
    pub moved: (i64, i64),
    /// How far the writes asked it to move (the TSC_ADJUST deltas summed).
    pub asked: i64,
    /// The verdict.
    pub says: ReadSays,
}

/// The later read's criterion, pure. A guest's TSC is the host's times the
/// vCPU's ratio (1 unless KVM scales it: `--tsc-khz`) plus its offset, so
/// between two reads it advances exactly as the host's interval, scaled,
/// unless a write moved the offset. From a
/// read before the first round (`first`) to the later one (`last`) the
/// guest's TSC therefore moved against the host's by what the honoured
/// writes asked (the TSC_ADJUST deltas, `asked`), by 0 if every write was
/// ignored. The host TSC brackets of the two reads bound that move: it lies
/// in `moved`. The read decides where exactly one of `asked` and 0 lies
/// there: an ignored write, whose written value is close to the TSC it
/// replaced, cannot pass for an honoured one (as it could under "later read
/// minus written value within the elapsed time").
pub fn read_says(first: Read, last: Read, asked: i64) -> ReadFinding {
    let guest = last.tsc.wrapping_sub(first.tsc) as i64;
    let r = first.ratio;
    let span = last.host_after.wrapping_sub(first.host_before);
    let slack = r.scale_error(span) as i128;
    let scaled = |h: u64| {
        let v = r.scale(i128::from(h as i64));
        (v - slack, v + slack)
    };
    let host_min = scaled(last.host_before.wrapping_sub(first.host_after)).0 as i64;
    let host_max = scaled(span).1 as i64;
    let moved = (
        guest.saturating_sub(host_max),
        guest.saturating_sub(host_min),
    );
    let within = |x: i64| (moved.0..=moved.1).contains(&x);
    let says = match (within(asked), within(0)) {
        (true, false) => ReadSays::Honoured,
        (false, true) => ReadSays::Ignored,
        (false, false) => ReadSays::Neither,
        (true, true) => ReadSays::CannotTell,
    };
    ReadFinding { moved, asked, says }
}

/// Every vCPU's later read judged, and what those whose writes asked for a
/// move say in words: (findings, failures, open questions).
fn later_reads(
    t: &RoundTally,
    reads: &[(Read, Read)],
) -> (Vec<ReadFinding>, Vec<String>, Vec<String>) {
    let mut found = Vec::new();
    let (mut fails, mut open) = (Vec::new(), Vec::new());
    for (i, (first, last)) in reads.iter().enumerate() {
        let asked = t.net_adjust.get(i).copied().unwrap_or(0);
        let f = read_says(*first, *last, asked);
        found.push(f);
        if asked == 0 {
            continue;
        }
        let (lo, hi) = (n(f.moved.0), n(f.moved.1));
        match f.says {
            ReadSays::Honoured => {}
            ReadSays::Ignored => fails.push(format!(
                "a later guest read shows vCPU {i}'s TSC moved by {lo}..{hi} cycles against the \
                 host's since before the first round, not by the {} its writes asked: they did \
                 not take effect",
                n(asked)
            )),
            ReadSays::Neither => fails.push(format!(
                "a later guest read shows vCPU {i}'s TSC moved by {lo}..{hi} cycles against the \
                 host's since before the first round, neither the {} its writes asked nor 0: \
                 not the written value plus the elapsed time",
                n(asked)
            )),
            ReadSays::CannotTell => open.push(format!(
                "the later read cannot tell vCPU {i}'s writes from none: its brackets allow a \
                 move of {lo}..{hi} cycles, which holds both the {} asked and 0",
                n(asked)
            )),
        }
    }
    (found, fails, open)
}

/// Check 4 from the rounds' tally and, per vCPU, a guest TSC read before
/// the first round and one after the last (`reads`; `host_elapsed`: host
/// cycles from the last round's start to the later read). Every
/// vCPU-round's verdict comes from the analysis (KVM's evidence when
/// conclusive, else the guest's). FAIL needs evidence that a write did not
/// take effect, or a later read that is not the written value plus the
/// elapsed time ([`read_says`]); vCPU-rounds neither side could decide, and
/// a later read whose brackets cannot tell the writes from none, make it
/// UNDECIDED; PASS needs every one decided honoured and every later read
/// where the writes put it. Only vCPU-rounds with a write count (the std
/// rendezvous writes nothing, Linux's sync only when it compensates).
pub fn judge(
    t: &RoundTally,
    reads: &[(Read, Read)],
    host_elapsed: u64,
    flavor: KvmFlavor,
) -> Finding {
    let total = t.wrote;
    let ignored = t.not_honoured();
    let by_host = t.honoured + ignored - t.decided_by_guest;
    let (found, read_fails, read_open) = later_reads(t, reads);
    let none = if t.rounds == 0 {
        super::judge::missing("first round").reason
    } else {
        "no vCPU wrote its TSC or TSC_ADJUST in any round: nothing to honour".into()
    };
    let mut f = Finding::skip(none)
        .with("vcpu_rounds", total)
        .with("honoured", t.honoured)
        .with("not_honoured", ignored)
        .with("undecided", t.undecided)
        .with("moved_nothing", t.moved_nothing)
        .with("decided_by_host", by_host)
        .with("decided_by_guest", t.decided_by_guest)
        .with("contradictory", t.contradictory)
        .with("vcpu_rounds_without_jump", t.no_jump)
        .with("last_written_value", t.last_written.unwrap_or(0))
        .with(
            "guest_tsc_after",
            reads.iter().map(|(_, l)| l.tsc).collect::<Vec<_>>(),
        )
        .with("host_cycles_since_last_round", host_elapsed)
        .with(
            "later_reads",
            reads
                .iter()
                .zip(&found)
                .map(|((first, last), f)| json!({"first": first, "later": last, "moved": f.moved, "asked": f.asked, "says": f.says}))
                .collect::<Vec<_>>(),
        );
    if total == 0 {
        return f;
    }
    if ignored > 0 || !read_fails.is_empty() {
        let mut what = Vec::new();
        if ignored > 0 {
            what.push(not_taken_effect(t, ignored, total));
        }
        what.extend(read_fails);
        f.set(
            Verdict::Fail,
            format!("{}{}", what.join("; "), context(flavor)),
        );
    } else if t.undecided > 0 || !read_open.is_empty() || t.honoured == 0 {
        let mut what = Vec::new();
        if t.honoured == 0 && t.undecided == 0 {
            what.push(format!(
                "all {total} vCPU-rounds wrote the value their TSC already held (KVM's \
                 TSC_ADJUST delta 0, the offset unmoved): nothing moved, so nothing shows \
                 whether writes take effect"
            ));
        } else if t.undecided > 0 {
            let why = if t.contradictory > 0 {
                format!(
                    ", {} of them because KVM's and the guest's evidence contradict each other",
                    t.contradictory
                )
            } else {
                String::new()
            };
            what.push(format!(
                "{} of {total} vCPU-rounds could not be decided (the offset change was \
                 within the bracketed reads' error and the guest's TSC could not tell){why}; {} \
                 took effect{}",
                t.undecided,
                t.honoured,
                moved_nothing(t)
            ));
        }
        what.extend(read_open);
        f.set(Verdict::Undecided, what.join("; "));
    } else {
        f.set(
            Verdict::Pass,
            format!(
                "in all {} rounds every vCPU's write took effect ({by_host} decided by KVM's \
                 evidence, {} by the guest's{}) and a later read found its TSC moved by what the \
                 writes asked",
                t.rounds,
                t.decided_by_guest,
                moved_nothing(t)
            ),
        );
    }
    f
}

/// ", K wrote the value their TSC already held and moved nothing" (empty
/// when none did): such writes are neither evidence nor a gap.
fn moved_nothing(t: &RoundTally) -> String {
    match t.moved_nothing {
        0 => String::new(),
        k => format!(", {k} wrote the value their TSC already held and moved nothing"),
    }
}

/// "K of N vCPU-rounds' writes did not take effect: <by which evidence>".
fn not_taken_effect(t: &RoundTally, ignored: u64, total: u64) -> String {
    let mut evidence = Vec::new();
    for (k, words) in [
        (t.not_honoured_by[0], "the exact offsets did not move"),
        (
            t.not_honoured_by[1],
            "the bracketed reads show the offsets did not move",
        ),
        (t.not_honoured_by[2], "the guests' TSCs did not jump"),
        (
            t.not_honoured_by[3],
            "KVM moved the TSC by a delta that puts the moment it handled the write before the \
             guest issued it (TSC_ADJUST's delta against the guest's TSC read just before the \
             write): the value written was not set, as when writes are snapped to one offset",
        ),
    ] {
        if k == ignored {
            evidence.push(words.to_string());
        } else if k > 0 {
            evidence.push(format!("{words} ({k})"));
        }
    }
    if t.no_jump == ignored && t.not_honoured_by[2] == 0 {
        evidence.push("the guests' TSCs did not jump either".into());
    }
    format!(
        "{ignored} of {total} vCPU-rounds' writes did not take effect: {}",
        evidence.join(", ")
    )
}

#[cfg(test)]
mod tests;
