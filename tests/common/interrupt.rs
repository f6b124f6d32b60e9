//! Interrupting a running command: start it, wait for its first rounds,
//! signal it, collect what it printed.

use std::io::{BufRead, BufReader, Read};
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
}

/// Starts `program args`, waits until the command has analysed `rounds`
/// rounds (its debug log says so, line by line), sends `signal` and waits for
/// it to end. The first wait is bounded by [`START_WITHIN_SECS`] (give the
/// command a `--timeout` of at most that, so that one that cannot reach the
/// rounds ends by its own watchdog), the second by the join grace of a stop,
/// both generously: a hang fails the test.
pub fn interrupt_after(program: &str, args: &[&str], rounds: usize, signal: i32) -> Stopped {
    let mut child = Command::new(program)
        .args(args)
        .env("RUST_LOG", "tsc_vmm::analysis=debug")
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let analysed = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().expect("stderr");
    let err_reader = {
        let (analysed, errors) = (analysed.clone(), errors.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains(" analysed") && line.contains("DEBUG") {
                    analysed.fetch_add(1, Ordering::SeqCst);
                } else if let Ok(mut e) = errors.lock() {
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
    let wait_until = Instant::now() + hang_bound(Duration::from_secs(START_WITHIN_SECS));
    while analysed.load(Ordering::SeqCst) < rounds {
        if Instant::now() > wait_until || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{args:?}: {} of {rounds} rounds analysed before the deadline or the exit; stderr: {}",
                analysed.load(Ordering::SeqCst),
                errors.lock().map(|e| e.clone()).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let analysed_before = analysed.load(Ordering::SeqCst);
    let pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) on our own child, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let signalled = Instant::now();
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
    }
}
