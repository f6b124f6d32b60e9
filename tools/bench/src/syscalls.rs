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

/// Runs the bench's own `--as-cli` child with `args` under `strace -f -qq`
/// and `options`; the trace, when the child exited with one of `ok_codes`.
fn strace_child(options: &[&str], args: &[&str], ok_codes: &[i32]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let file = std::env::temp_dir().join(format!("tsc-bench-strace-{}.txt", std::process::id()));
    let status = Command::new("strace")
        .args(["-f", "-qq"])
        .args(options)
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
    if !status.code().is_some_and(|c| ok_codes.contains(&c)) {
        return Err(format!("the traced run failed ({status})"));
    }
    Ok(text)
}

/// Traces the bench's own `--as-cli` child running `args` (exit codes 0
/// and 1 are runs that completed: `check` exits 1 when a check fails).
fn traced(args: &[String]) -> Result<Counts, String> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = strace_child(&[], &args, &[0, 1])?;
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

/// Per thread, in order, the duration of every KVM_RUN (ms) in `strace -f
/// -T` output (a call split into `<unfinished ...>` and `<... resumed>`
/// lines is one call, its time on the resumed line).
fn kvm_runs(text: &str) -> BTreeMap<u32, Vec<f64>> {
    let mut open: BTreeMap<u32, bool> = BTreeMap::new();
    let mut runs: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for line in text.lines() {
        let mut it = line.splitn(2, char::is_whitespace);
        let (Some(Ok(pid)), Some(rest)) = (it.next().map(str::parse::<u32>), it.next()) else {
            continue;
        };
        let rest = rest.trim_start();
        let is_run = if rest.starts_with("<... ioctl resumed>") {
            open.remove(&pid).unwrap_or(false)
        } else if let Some(args) = rest.strip_prefix("ioctl(") {
            let run = ioctl_name(args) == "ioctl KVM_RUN";
            if rest.ends_with("<unfinished ...>") {
                open.insert(pid, run);
                continue;
            }
            run
        } else {
            false
        };
        let took = rest
            .rsplit_once('<')
            .and_then(|(_, t)| t.strip_suffix('>'))
            .and_then(|t| t.parse::<f64>().ok());
        if let (true, Some(t)) = (is_run, took) {
            runs.entry(pid).or_default().push(t * 1e3);
        }
    }
    runs
}

/// Per vCPU thread, the durations (ms) of its KVM_RUN calls in a traced
/// run of the command line `args` (only ioctls are traced, with seccomp-bpf
/// filtering, so the calls in between are not slowed).
pub fn kvm_run_times(args: &[&str]) -> Result<Vec<Vec<f64>>, String> {
    let text = strace_child(&["--seccomp-bpf", "-e", "trace=ioctl", "-T"], args, &[0])?;
    Ok(kvm_runs(&text).into_values().collect())
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

    #[test]
    fn kvm_run_times_are_per_thread_with_split_calls_joined() {
        let t = "10 ioctl(4, KVM_CREATE_VM, 0) = 4 <0.000400>\n\
                 11 ioctl(5, KVM_RUN <unfinished ...>\n\
                 12 ioctl(6, KVM_RUN, 0) = 0 <0.002000>\n\
                 11 <... ioctl resumed>, 0) = 0 <0.003500>\n\
                 11 ioctl(5, KVM_GET_MSRS, 0x7f) = 1 <0.000080>\n\
                 11 ioctl(5, KVM_RUN, 0) = 0 <0.000700>\n\
                 12 ioctl(6, KVM_GET_MSRS <unfinished ...>\n\
                 12 <... ioctl resumed>0x7f) = 1 <0.000090>\n";
        let r = kvm_runs(t);
        let ms = |v: &[f64]| {
            v.iter()
                .map(|x| (x * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(ms(&r[&11]), vec![3.5, 0.7]);
        assert_eq!(ms(&r[&12]), vec![2.0]);
        assert_eq!(r.len(), 2, "{r:?}");
    }
}
