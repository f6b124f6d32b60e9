//! Interrupting a running command: start it, wait until it has measured
//! something, signal it the way a person, a wrapper or a supervisor does,
//! collect what it printed.
//!
//! The ways ([`Send`]): a signal to the command itself; the same signal to
//! its whole process group (the command then runs in a process group of
//! its own, so that the test's group is never hit), sent only once the
//! previous one was taken (no longer pending in `/proc/PID/status`), so
//! that the copies arrive as two signals and are never merged into one;
//! a pause. A real wrapper (GNU `timeout`) is started as `program` and the
//! signal sent to it: it forwards the signal to the command and then to
//! its process group, as it does at its time limit.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::hang_bound;

/// The longest [`interrupt_after`] waits for the rounds it waits for.
pub const START_WITHIN_SECS: u64 = 300;

pub struct Stopped {
    pub status: ExitStatus,
    pub stdout: String,
    /// stderr without the debug lines the test waited for.
    pub stderr: String,
    /// Rounds the command said it had analysed before it was signalled.
    pub analysed_before: usize,
    /// Rounds the command said it had analysed by the time it ended.
    pub analysed: usize,
}

/// What the command must have done before it is signalled.
#[derive(Debug, Clone, Copy)]
pub enum Until<'a> {
    /// Analysed this many rounds (its debug log says so, line by line).
    Analysed(usize),
    /// Written a line on stderr containing this.
    Line(&'a str),
}

/// One step of the interruption.
#[derive(Debug, Clone, Copy)]
pub enum Send {
    /// kill(pid, signal).
    Child(i32),
    /// kill(-pgid, signal): the command's whole process group.
    Group(i32),
    /// Wait this long.
    Pause(Duration),
}

/// Whether `signal` is pending for the whole process `pid` (not yet taken
/// by a thread): bit `signal - 1` of `ShdPnd` in /proc/PID/status.
fn pending(pid: i32, signal: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("ShdPnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

/// Starts `program args`, waits until the command has analysed `rounds`
/// rounds, sends `signal` and waits for it to end (see [`interrupt`]).
pub fn interrupt_after(program: &str, args: &[&str], rounds: usize, signal: i32) -> Stopped {
    interrupt(
        program,
        args,
        Until::Analysed(rounds),
        &[Send::Child(signal)],
    )
}

/// Starts `program args`, waits for `until`, takes the `steps` and waits
/// for the command to end. The first wait is bounded by
/// [`START_WITHIN_SECS`] (give the command a `--timeout` of at most that,
/// so that one that cannot reach the point ends by its own watchdog), the
/// second by the join grace of a stop, both generously: a hang fails the
/// test. A signal step waits, before the next step, until the signal was
/// taken, so that two steps are two signals.
pub fn interrupt(program: &str, args: &[&str], until: Until, steps: &[Send]) -> Stopped {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("RUST_LOG", "tsc_vmm::analysis=debug,tsc_vmm::restore=info")
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if steps.iter().any(|s| matches!(s, Send::Group(_))) {
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().expect("the binary starts");
    let analysed = Arc::new(AtomicUsize::new(0));
    let lines_seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let errors = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().expect("stderr");
    let err_reader = {
        let (analysed, errors, lines_seen) = (analysed.clone(), errors.clone(), lines_seen.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains(" analysed") && line.contains("DEBUG") {
                    analysed.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                if let Ok(mut seen) = lines_seen.lock() {
                    seen.push(line.clone());
                }
                if let Ok(mut e) = errors.lock() {
                    e.push_str(&line);
                    e.push('\n');
                }
            }
        })
    };
    let mut stdout = child.stdout.take().expect("stdout");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let reached = || match until {
        Until::Analysed(n) => analysed.load(Ordering::SeqCst) >= n,
        Until::Line(text) => lines_seen
            .lock()
            .map(|l| l.iter().any(|l| l.contains(text)))
            .unwrap_or(false),
    };
    let wait_until = Instant::now() + hang_bound(Duration::from_secs(START_WITHIN_SECS));
    while !reached() {
        if Instant::now() > wait_until || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{args:?}: {until:?} not reached before the deadline or the exit ({} rounds \
                 analysed); stderr: {}",
                analysed.load(Ordering::SeqCst),
                errors.lock().map(|e| e.clone()).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let analysed_before = analysed.load(Ordering::SeqCst);
    let pid = i32::try_from(child.id()).expect("pid");
    let mut signalled = Instant::now();
    for (i, step) in steps.iter().enumerate() {
        let (target, signal) = match *step {
            Send::Pause(d) => {
                std::thread::sleep(d);
                continue;
            }
            Send::Child(s) => (pid, s),
            Send::Group(s) => (-pid, s),
        };
        // SAFETY: kill(2) on our own child (or its own process group, of
        // which it is the leader), not yet waited for, so its pid is not
        // reused. A later step may find it gone, which is not an error.
        let r = unsafe { libc::kill(target, signal) };
        assert!(r == 0 || i > 0, "{args:?}: the first signal was refused");
        if i == 0 {
            signalled = Instant::now();
        }
        // Taken before the next step: two steps are two deliveries.
        let taken_by = Instant::now() + hang_bound(Duration::ZERO);
        while pending(pid, signal) && Instant::now() < taken_by {
            std::thread::yield_now();
        }
    }
    let status = loop {
        if let Some(s) = child.try_wait().expect("waitpid") {
            break s;
        }
        if signalled.elapsed() > hang_bound(Duration::ZERO) {
            let _ = child.kill();
            panic!(
                "{args:?}: still running {:?} after the signal",
                signalled.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = err_reader.join();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = errors.lock().map(|e| e.clone()).unwrap_or_default();
    assert!(!stderr.contains("panicked at"), "{stderr}");
    Stopped {
        status,
        stdout,
        stderr,
        analysed_before,
        analysed: analysed.load(Ordering::SeqCst),
    }
}
