//! Syscalls per round, counted with `strace -f` (when it is installed): a
//! child runs `run` twice over, with two round counts; the difference of
//! the counts over the difference of the rounds is what one round costs, by
//! thread (the main thread, which drives the rounds, and the others: vCPU
//! or host threads) and by syscall (ioctls by request).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// The counts of one traced run: (main thread?, syscall) -> calls.
type Counts = BTreeMap<(bool, String), u64>;

/// The name of the ioctl request `req` (as strace prints it), shortened.
fn ioctl_name(args: &str) -> String {
    let req = args.split(',').nth(1).unwrap_or("");
    let req = req
        .split(['(', ' ', ')'])
        .find(|t| !t.is_empty())
        .unwrap_or("?");
    format!("ioctl {req}")
}

/// Parses `strace -f -o` output: `PID name(args...` per line.
fn parse(text: &str, main_pid: u32) -> Counts {
    let mut counts = Counts::new();
    for line in text.lines() {
        let mut it = line.splitn(2, char::is_whitespace);
        let (Some(pid), Some(rest)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let rest = rest.trim_start();
        // "<... futex resumed>" lines continue a call counted already.
        if rest.starts_with('<') || rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        let Some((name, args)) = rest.split_once('(') else {
            continue;
        };
        let name = if name == "ioctl" {
            ioctl_name(args)
        } else {
            name.to_string()
        };
        *counts.entry((pid == main_pid, name)).or_default() += 1;
    }
    counts
}

/// Traces the bench's own `--as-cli` child running `args` (exit codes 0
/// and 1 are runs that completed: `check` exits 1 when a check fails).
fn traced(args: &[String]) -> Result<Counts, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let file = std::env::temp_dir().join(format!("tsc-bench-strace-{}.txt", std::process::id()));
    let status = Command::new("strace")
        .arg("-f")
        .arg("-qq")
        .arg("-o")
        .arg(&file)
        .arg(&exe)
        .arg("--as-cli")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("strace: {e}"))?;
    let text = std::fs::read_to_string(&file).map_err(|e| e.to_string());
    let _ = std::fs::remove_file(&file);
    let text = text?;
    if !status.code().is_some_and(|c| c == 0 || c == 1) {
        return Err(format!("the traced run failed ({status})"));
    }
    // The first line is the exec of the child itself: its pid is the main
    // thread's.
    let main_pid = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .ok_or("empty trace")?;
    Ok(parse(&text, main_pid))
}

/// Per round: (main thread?, syscall, calls per round), for the rows that
/// differ between `small` and `large` rounds of `run` with `base` args.
pub fn per_round(
    base: &[&str],
    small: u32,
    large: u32,
) -> Result<Vec<(bool, String, f64)>, String> {
    let args = |n: u32| -> Vec<String> {
        let mut a: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        a.extend(["--rounds".into(), n.to_string()]);
        a
    };
    let a = traced(&args(small))?;
    let b = traced(&args(large))?;
    let d = f64::from(large - small);
    let mut out: Vec<(bool, String, f64)> = b
        .iter()
        .map(|((main, name), &n)| {
            let m = a.get(&(*main, name.clone())).copied().unwrap_or(0);
            (*main, name.clone(), (n as f64 - m as f64) / d)
        })
        .filter(|(_, _, per)| per.abs() >= 0.05)
        .collect();
    out.sort_by(|x, y| y.0.cmp(&x.0).then(y.2.total_cmp(&x.2)));
    Ok(out)
}

/// How many VMs the command line `args` creates (KVM_CREATE_VM calls),
/// when strace can tell.
pub fn vms_created(args: &[&str]) -> Option<u64> {
    if !available() {
        return None;
    }
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let counts = traced(&args).ok()?;
    Some(
        counts
            .iter()
            .filter(|((_, name), _)| name == "ioctl KVM_CREATE_VM")
            .map(|(_, n)| n)
            .sum(),
    )
}

/// Whether strace can run here.
pub fn available() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_lines_are_counted_by_thread_and_request() {
        let t = "10 execve(\"x\", [\"x\"], 0x0) = 0\n\
                 10 ioctl(3, KVM_RUN, 0) = 0\n\
                 10 ioctl(3, KVM_RUN <unfinished ...>\n\
                 11 ioctl(4, KVM_GET_MSRS, 0x7f) = 1\n\
                 11 futex(0x1, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>\n\
                 11 <... futex resumed>) = 0\n\
                 12 +++ exited with 0 +++\n";
        let c = parse(t, 10);
        assert_eq!(c.get(&(true, "ioctl KVM_RUN".into())), Some(&2));
        assert_eq!(c.get(&(false, "ioctl KVM_GET_MSRS".into())), Some(&1));
        assert_eq!(c.get(&(false, "futex".into())), Some(&1));
        assert_eq!(c.len(), 4);
    }
}
