//! The process-wide stop request: SIGINT and SIGTERM (or a test) ask every
//! run in the process to stop as soon as it can, keeping what it measured.
//! Whoever waits for vCPUs polls [`requested`]; the commands install the
//! handlers with [`install_handlers`].
//!
//! Only the first signal counts. Wrappers deliver the same signal twice
//! within microseconds (GNU `timeout` to its child and then to its process
//! group; CI runners and container runtimes kill process groups), so a
//! repeated SIGTERM is absorbed and the report still written; only a SIGINT
//! [`KILL_GRACE`] or more after the first, a person insisting, kills at
//! once ([`escalation`]), and SIGKILL remains for a supervisor that will not
//! wait.

use std::fmt;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// The signal that asked the run to stop, 0 for none.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Asks every run in this process to stop as soon as it can, keeping the
/// rounds completed so far. Only stores to an atomic: safe to call from a
/// signal handler.
pub fn request(signal: i32) {
    STOP_SIGNAL.store(signal.max(1), Ordering::SeqCst);
}

/// The signal passed to [`request`], if any.
pub fn requested() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Called by a command once it has stopped because of `signal` and is about
/// to report what it measured: says so in the log.
pub fn seen(signal: i32) {
    log::info!(
        "stopping on {}: reporting what was measured",
        signal_name(signal)
    );
    let repeats = absorbed();
    if repeats > 0 {
        log::info!(
            "{repeats} more stop signal(s) arrived meanwhile and changed nothing (a second \
             SIGINT {} s after the first kills at once; SIGKILL always does)",
            KILL_GRACE.as_secs()
        );
    }
}

/// A signal's name, for messages.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT (Ctrl-C)".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        s => format!("signal {s}"),
    }
}

/// A signal, shown by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub i32);

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&signal_name(self.0))
    }
}

/// The exit code of a process stopped by `signal`: 128 + its number.
pub fn exit_code(signal: i32) -> u8 {
    (128 + signal.clamp(1, 127)) as u8
}

/// How long after the first stop request a SIGINT still counts as part of
/// it. A second SIGINT later than this is a person insisting: it kills at
/// once. Wrappers that forward a signal (GNU `timeout` sends it to its child
/// and then to the whole process group; CI runners, container runtimes and
/// shells kill process groups) deliver their copies within microseconds.
pub const KILL_GRACE: Duration = Duration::from_secs(1);

/// What a stop signal does, given the first stop request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escalation {
    /// The first: ask the run to stop, keeping what it measured.
    Stop,
    /// A repeat that changes nothing: the stop already under way goes on.
    /// Every repeated SIGTERM is one (SIGKILL exists for a supervisor that
    /// will not wait), and so is a SIGINT within [`KILL_GRACE`].
    Absorb,
    /// A SIGINT at least [`KILL_GRACE`] after the first request: die of it
    /// at once, throwing the report away, as asked.
    Kill,
}

/// The rule, pure: `signal` arrives `since_first` after the first stop
/// request (`None`: there was none).
pub fn escalation(signal: i32, since_first: Option<Duration>) -> Escalation {
    match since_first {
        None => Escalation::Stop,
        Some(t) if signal == libc::SIGINT && t >= KILL_GRACE => Escalation::Kill,
        Some(_) => Escalation::Absorb,
    }
}

/// CLOCK_MONOTONIC in nanoseconds, at least 1 (0 means "never").
/// Async-signal-safe: clock_gettime(2) is on POSIX's list.
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given, which
    // lives on this stack frame; CLOCK_MONOTONIC exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    let ns = u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0));
    ns.max(1)
}

/// When the first stop request came (CLOCK_MONOTONIC ns), 0 for none.
static FIRST_AT_NS: AtomicU64 = AtomicU64::new(0);
/// Stop signals after the first that changed nothing.
static ABSORBED: AtomicU32 = AtomicU32::new(0);

/// How many stop signals after the first changed nothing (repeats of a
/// wrapper or a supervisor, see [`Escalation::Absorb`]).
pub fn absorbed() -> u32 {
    ABSORBED.load(Ordering::SeqCst)
}

extern "C" fn on_stop_signal(signal: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Async-signal-safe throughout: atomics and clock_gettime, and for a
    // kill signal(2) and raise(3).
    let now = monotonic_ns();
    let first = match FIRST_AT_NS.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => None,
        Err(at) => Some(Duration::from_nanos(now.saturating_sub(at))),
    };
    match escalation(signal, first) {
        // The run then stops its vCPUs, keeps what it measured and exits
        // with 128 + signal.
        Escalation::Stop => request(signal),
        Escalation::Absorb => {
            ABSORBED.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: signal(2) and raise(3) are async-signal-safe; restoring
        // the default action makes the raise terminate the process.
        Escalation::Kill => unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        },
    }
}

/// Makes SIGINT (Ctrl-C) and SIGTERM stop the command cleanly instead of
/// killing the process, even when the shell started it with them ignored.
/// Repeats are absorbed, except a SIGINT [`KILL_GRACE`] or more after the
/// first request, which kills at once (see [`escalation`]).
pub fn install_handlers() -> Result<(), String> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        vmm_sys_util::signal::register_signal_handler(signal, on_stop_signal)
            .map_err(|e| format!("cannot install the {} handler: {e}", signal_name(signal)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal() {
        assert_eq!(exit_code(libc::SIGINT), 130);
        assert_eq!(exit_code(libc::SIGTERM), 143);
        assert_eq!(exit_code(0), 129);
    }

    /// The first signal stops; repeated SIGTERMs (a wrapper's copy, a
    /// supervisor's second) never kill; a SIGINT kills only from the grace
    /// on, whichever signal came first.
    #[test]
    fn only_a_late_second_sigint_escalates() {
        let (int, term) = (libc::SIGINT, libc::SIGTERM);
        assert_eq!(escalation(term, None), Escalation::Stop);
        assert_eq!(escalation(int, None), Escalation::Stop);
        let soon = Some(Duration::from_micros(5));
        let late = Some(KILL_GRACE);
        let much_later = Some(KILL_GRACE * 600);
        for t in [soon, late, much_later] {
            assert_eq!(escalation(term, t), Escalation::Absorb, "{t:?}");
        }
        assert_eq!(escalation(int, soon), Escalation::Absorb);
        assert_eq!(
            escalation(int, Some(KILL_GRACE - Duration::from_nanos(1))),
            Escalation::Absorb
        );
        assert_eq!(escalation(int, late), Escalation::Kill);
        assert_eq!(escalation(int, much_later), Escalation::Kill);
    }

    #[test]
    fn names_say_which_signal() {
        assert_eq!(signal_name(libc::SIGINT), "SIGINT (Ctrl-C)");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(50), "signal 50");
    }
}
