//! `restore`: snapshot a command-mode VM after a rendezvous, destroy it,
//! restore it into a fresh VM by each method asked for, and report what each
//! did to the vCPUs' relative offsets and to the guests' TSCs. Exit codes as
//! `run`: 0 every method asked for was measured or reported as not
//! supported here (at least one ran), 1 a method failed after it started
//! (what was measured is still reported), 2 nothing could run (bad
//! arguments, no usable /dev/kvm, no method this kernel supports), 130/143
//! stopped by SIGINT/SIGTERM (what was measured is reported).

use std::time::Duration;

use clap::Args;
use tsc_contract::Variant;

use super::args::{parse_one_variant, parse_timeout, parse_tsc_khz, parse_vcpus};
use super::common::{cannot_run, install_stop_handlers, Exit};
use crate::output;
use crate::restore::{self, text, ChainDelay, Method, MethodOptions, MAX_DELAY_MS};
use crate::tsc::frequency::TscRequest;

/// `--methods`: one or more distinct methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodList(pub Vec<Method>);

fn valid_methods() -> String {
    Method::ALL.map(Method::name).join(", ")
}

/// `--methods`: one or more distinct known methods, comma-separated.
pub fn parse_methods(s: &str) -> Result<MethodList, String> {
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let m = Method::from_name(name)
            .ok_or_else(|| format!("unknown method '{name}'; valid: {}", valid_methods()))?;
        if out.contains(&m) {
            return Err(format!("method '{name}' is listed twice"));
        }
        out.push(m);
    }
    if out.is_empty() {
        return Err(format!(
            "name at least one method (valid: {})",
            valid_methods()
        ));
    }
    Ok(MethodList(out))
}

/// `--delay-ms`: 0..=[`MAX_DELAY_MS`].
pub fn parse_delay_ms(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of milliseconds"))?;
    if n > MAX_DELAY_MS {
        return Err(format!(
            "{n} ms is more than {MAX_DELAY_MS}: the delay is bounded to keep a run short; a \
             minute is far beyond KVM's one-second matching window of host TSC writes, the \
             boundary that matters; use 0..={MAX_DELAY_MS}"
        ));
    }
    Ok(n)
}

/// Options of `restore`.
#[derive(Debug, Args, Clone)]
pub struct RestoreArgs {
    /// Number of vCPUs (1 up to what KVM and the guest layout allow).
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// The variant of the rendezvous run before the snapshot (xen-4.15,
    /// xen-6ca022a1, xen-head): it leaves the skew a restore must keep.
    #[arg(long, default_value = "xen-head", value_parser = parse_one_variant)]
    pub variant: Variant,

    /// Milliseconds between destroying the source VM and creating the
    /// destination (0..=60000; the guests' TSCs must move on by it).
    #[arg(long, default_value_t = 100, value_parser = parse_delay_ms)]
    pub delay_ms: u64,

    /// The methods to measure, comma-separated, in order: documented
    /// (Documentation/virt/kvm/devices/vcpu.rst: KVM_SET_CLOCK with
    /// KVM_CLOCK_REALTIME and KVM_VCPU_TSC_OFFSET), msr (KVM_SET_MSRS of
    /// IA32_TSC = saved value + elapsed time), msr-twice (the same written
    /// twice). A method this kernel cannot do is reported as not run, with
    /// why.
    #[arg(long, default_value = "documented,msr,msr-twice", value_parser = parse_methods)]
    pub methods: MethodList,

    /// Iterations of the guest warp test per vCPU after the restore.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub warp_iterations: u64,

    /// Skip the chained restore (by default every method's restored guest
    /// runs, is snapshotted and restored again, to show what the method
    /// keeps after two restores: one extra VM per method).
    #[arg(long)]
    pub no_chain: bool,

    /// Print one JSON document (schema `tsc-rendezvous/restore/v1`,
    /// vmm/schema/restore-v1.json) instead of the readable report.
    #[arg(long)]
    pub json: bool,

    /// Give up on a VM (the source or the restored one) after this many
    /// seconds. Default: 60 s plus 1 s per vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,

    /// The source VMs' guest TSC frequency: KHZ (e.g. 1300000) or a ratio
    /// of the host's rate (e.g. 0.5x, 2x), set as `run --tsc-khz` sets it;
    /// every restored VM is then set to the rate saved (the snapshot's
    /// KVM_GET_TSC_KHZ), as a VMM restoring on a host of another rate
    /// must, and the methods' arithmetic runs in scaled cycles. Without TSC
    /// scaling KVM refuses a rate below the host's and serves a higher one
    /// by catch-up. Default: the host's rate, and no rate is set.
    #[arg(long, value_name = "KHZ|RATIOx", value_parser = parse_tsc_khz)]
    pub tsc_khz: Option<TscRequest>,
}

impl RestoreArgs {
    /// What one method's measurement is asked to do (`fail_at`: the
    /// test-only failure injection).
    pub fn options(&self, fail_at: Option<restore::Step>) -> MethodOptions {
        MethodOptions {
            vcpus: self.vcpus,
            variant: self.variant,
            delay: Duration::from_millis(self.delay_ms),
            warp_iterations: self.warp_iterations,
            timeout: self
                .timeout
                .unwrap_or(Duration::from_secs(60) + Duration::from_secs(1) * self.vcpus),
            fail_at,
            chain: !self.no_chain,
            tsc: self.tsc_khz,
            chain_delay: ChainDelay::Same,
        }
    }
}

/// Runs `restore`.
pub fn main(args: &RestoreArgs) -> Exit {
    let fail_at = match restore::fail_from_env() {
        Ok(f) => f,
        Err(e) => return cannot_run(e),
    };
    if let Err(exit) = install_stop_handlers() {
        return exit;
    }
    let opts = args.options(fail_at);
    let outcome = restore::run::run(&opts, &args.methods.0, |m| {
        log::info!(
            "restore: {} {}",
            m.method,
            m.offsets_outcome.as_deref().unwrap_or("not measured")
        );
    });
    let mut exit = Exit::Done;
    if let Some(r) = &outcome.report {
        if let Err(e) = output::print(r, args.json, text::render_text) {
            eprintln!("error: cannot print the report: {e}");
            exit = Exit::Failed;
        }
    }
    let Some((method, error)) = outcome.error else {
        if !outcome.measured {
            let why: Vec<String> = outcome
                .report
                .iter()
                .flat_map(|r| &r.methods)
                .filter_map(|m| Some(format!("{}: {}", m.method, m.not_run_reason.as_ref()?)))
                .collect();
            return cannot_run(format_args!(
                "none of the methods asked for can run on this kernel ({})",
                why.join("; ")
            ));
        }
        return exit;
    };
    let step = outcome
        .report
        .as_ref()
        .and_then(|r| r.methods.last())
        .and_then(|m| m.failed_step)
        .and_then(restore::Step::from_name);
    match (method, step) {
        (Some(m), Some(s)) => eprintln!(
            "error: restore by {} failed in step '{}' ({}): {error}; both VMs were freed",
            m.name(),
            s.name(),
            s.describe()
        ),
        (Some(m), None) => eprintln!("error: restore by {}: {error}", m.name()),
        (None, _) => eprintln!("error: {error}"),
    }
    exit.worst(match error.signal() {
        Some(signal) => Exit::Stopped(signal),
        None if !outcome.measured && error.is_setup() => Exit::CannotRun,
        None => Exit::Failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_parse_in_order_and_bad_lists_name_the_fix() {
        assert_eq!(
            parse_methods("msr-twice, documented"),
            Ok(MethodList(vec![Method::MsrTwice, Method::Documented]))
        );
        let e = parse_methods("msr,msr").expect_err("twice");
        assert!(e.contains("listed twice"), "{e}");
        let e = parse_methods("qemu").expect_err("unknown");
        assert!(e.contains("documented, msr, msr-twice"), "{e}");
        assert!(parse_methods(",").is_err());
    }

    #[test]
    fn the_delay_is_bounded_and_says_why() {
        assert_eq!(parse_delay_ms("0"), Ok(0));
        assert_eq!(parse_delay_ms("60000"), Ok(60_000));
        let e = parse_delay_ms("60001").expect_err("too long");
        assert!(
            e.contains("0..=60000") && e.contains("one-second matching"),
            "{e}"
        );
        assert!(parse_delay_ms("-1")
            .expect_err("negative")
            .contains("milliseconds"));
        assert!(parse_delay_ms("1.5").is_err());
    }
}
