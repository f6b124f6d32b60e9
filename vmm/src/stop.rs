//! The process-wide stop request: SIGINT and SIGTERM (or a test) ask every
//! run in the process to stop as soon as it can, keeping what it measured.
//! Whoever waits for vCPUs polls [`requested`]; the commands install the
//! handlers with [`install_handlers`].

use std::fmt;
use std::sync::atomic::{AtomicI32, Ordering};

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

extern "C" fn on_stop_signal(signal: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if requested().is_some() {
        // The second one: the user insists. Die of the signal at once.
        // SAFETY: signal(2) and raise(3) are async-signal-safe; restoring the
        // default action makes the raise terminate the process.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
        return;
    }
    // Async-signal-safe: it only stores to an atomic. The run then stops
    // its vCPUs, keeps what it measured and exits with 128 + signal.
    request(signal);
}

/// Makes SIGINT (Ctrl-C) and SIGTERM stop the command cleanly instead of
/// killing the process, even when the shell started it with them ignored;
/// a second one kills at once.
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

    #[test]
    fn names_say_which_signal() {
        assert_eq!(signal_name(libc::SIGINT), "SIGINT (Ctrl-C)");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(50), "signal 50");
    }
}
