//! Value parsers shared by the subcommands' options: each refuses a bad value
//! with a message naming the problem and the fix (clap exits 2 with it).

use crate::tsc::frequency::TscRequest;
use std::time::Duration;

use tsc_contract::{layout, Inject, Variant};
use tsc_sync::ITERATIONS;

use crate::options::{Backend, Injection, MAX_DURATION, MAX_ROUNDS};

/// `--variants`: two or more distinct variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantList(pub Vec<Variant>);

/// `--variants`: two or more distinct known variants, comma-separated.
pub fn parse_variant_list(s: &str) -> Result<VariantList, String> {
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let v = Variant::from_name(name)
            .ok_or_else(|| format!("unknown variant '{name}'; valid: {}", valid_variants()))?;
        if out.contains(&v) {
            return Err(format!("variant '{name}' is listed twice"));
        }
        out.push(v);
    }
    if out.len() < 2 {
        return Err(format!(
            "name at least two variants to compare, comma-separated (valid: {})",
            valid_variants()
        ));
    }
    Ok(VariantList(out))
}

/// `--bootstrap`: 100..=1,000,000 replicates.
pub fn parse_bootstrap(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    if !(100..=1_000_000).contains(&n) {
        return Err("use between 100 and 1000000 bootstrap replicates".into());
    }
    Ok(n)
}

/// One known variant (`check --variant`).
pub fn parse_one_variant(s: &str) -> Result<Variant, String> {
    Variant::from_name(s)
        .ok_or_else(|| format!("unknown variant '{s}'; valid: {}", valid_variants()))
}

/// A positive, finite number.
pub fn parse_positive(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err("must be a positive number".into());
    }
    Ok(v)
}

/// A percentage, 0..=10000, with or without `%`.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage"))?;
    if !(0.0..=10_000.0).contains(&v) {
        return Err("the tolerance must be between 0 and 10000 percent".into());
    }
    Ok(v)
}

/// `--variant`: one variant or all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VariantChoice {
    /// Every variant.
    All,
    /// Just this one.
    One(Variant),
}

/// The valid variant names, comma-separated.
pub fn valid_variants() -> String {
    Variant::ALL.map(Variant::name).join(", ")
}

/// `run --variant`: one variant or `all`.
pub fn parse_variants(s: &str) -> Result<VariantChoice, String> {
    if s == "all" {
        return Ok(VariantChoice::All);
    }
    Variant::from_name(s)
        .map(VariantChoice::One)
        .ok_or_else(|| format!("unknown variant '{s}'; valid: {}, all", valid_variants()))
}

/// `--vcpus`: 1 up to what the guest memory layout holds.
pub fn parse_vcpus(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    if n == 0 {
        return Err("at least one vCPU is needed; use --vcpus 1 or more".into());
    }
    if n > layout::MAX_VCPUS {
        return Err(format!(
            "{n} vCPUs do not fit the guest memory layout; use at most {}",
            layout::MAX_VCPUS
        ));
    }
    Ok(n)
}

/// The largest `--initial-skew`: 10^15 cycles (about four days at 3 GHz),
/// far inside the 63 bits a signed offset difference holds.
pub const MAX_INITIAL_SKEW: u64 = 1_000_000_000_000_000;

/// `--initial-skew CYCLES`: a whole number of TSC cycles (`_` may group
/// digits), at most [`MAX_INITIAL_SKEW`].
pub fn parse_initial_skew(s: &str) -> Result<u64, String> {
    let t: String = s.trim().chars().filter(|&c| c != '_').collect();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "'{s}' is not a whole number of TSC cycles (such as 1000000)"
        ));
    }
    match t.parse::<u64>() {
        Ok(n) if n <= MAX_INITIAL_SKEW => Ok(n),
        _ => Err(format!(
            "{t} cycles is more than the {MAX_INITIAL_SKEW} cycles --initial-skew takes"
        )),
    }
}

/// `--tsc-khz KHZ|RATIOx`: the guest's TSC frequency, in kHz or as a ratio
/// of the host's rate ([`TscRequest::parse`]).
pub fn parse_tsc_khz(s: &str) -> Result<TscRequest, String> {
    TscRequest::parse(s)
}

/// The help of `--tsc-khz`, the same on every command.
pub const TSC_KHZ_HELP: &str = "The guest's TSC frequency: KHZ (e.g. 1300000) or a ratio of the \
    host's rate (e.g. 0.5x, 2x), set with KVM_SET_TSC_KHZ on the VM before its vCPUs exist where \
    KVM has KVM_CAP_VM_TSC_CONTROL, else on every vCPU (then, if KVM scales, every TSC is written \
    0 by the host, as QEMU does). Without TSC scaling KVM refuses a rate below the host's and \
    serves a higher one by catch-up. Default: the host's rate. KVM only.";

/// Why `--tsc-khz` is refused with `--backend host`.
pub const TSC_KHZ_NEEDS_KVM: &str =
    "--tsc-khz sets the guest's TSC frequency through KVM: use it with --backend kvm";

/// `--rounds`: at least one, at most what the 32-bit round counter holds
/// ([`MAX_ROUNDS`]).
pub fn parse_rounds(s: &str) -> Result<u32, String> {
    let t = s.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{s}' is not a whole number"));
    }
    let n = t.trim_start_matches('0');
    if n.is_empty() {
        return Err("at least one round is needed; use --rounds 1 or more".into());
    }
    // MAX_ROUNDS is u32::MAX: what parses as a u32 fits.
    match n.parse::<u32>() {
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "{n} rounds is more than the 32-bit round counter holds; use at most {MAX_ROUNDS}"
        )),
    }
}

/// `--duration DUR`: a length of time as numbers with units, e.g. `30s`,
/// `90m`, `8h`, `1h30m`, `1.5d`, `500ms` (units: ms, s, m, h, d and their
/// long forms; parts add up). More than 0 and at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let example = "give a number with a unit, e.g. 30s, 90m, 8h or 1h30m";
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(format!("an empty duration; {example}"));
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("'{s}' is not a duration; {example}"))?;
        let tail = tail.trim_start();
        let unit_len = tail
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ms" | "msec" | "millis" => 1e-3,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            "d" | "day" | "days" => 86_400.0,
            "" => return Err(format!("'{num}' has no unit; {example}")),
            other => {
                return Err(format!(
                    "unknown unit '{other}' in '{s}'; use ms, s, m, h or d, e.g. 30s, 90m, 8h"
                ))
            }
        };
        total += value * seconds;
        rest = tail.trim_start();
    }
    let max_days = MAX_DURATION.as_secs() / 86_400;
    if !total.is_finite() || total > MAX_DURATION.as_secs_f64() {
        return Err(format!(
            "'{s}' is longer than the longest soak, {max_days} days (the round counters are \
             32-bit); use at most {max_days}d"
        ));
    }
    let d = Duration::from_secs_f64(total);
    if d < Duration::from_millis(1) {
        return Err(format!(
            "a duration of '{s}' runs nothing; use at least 1ms, e.g. 30s"
        ));
    }
    Ok(d)
}

/// The longest `--summary-every` accepted, minutes (the longest soak).
pub const MAX_SUMMARY_MINUTES: f64 = 43_200.0;

/// `--summary-every MINUTES`: a positive number of minutes (fractions
/// allowed, e.g. 0.5), at most [`MAX_SUMMARY_MINUTES`].
pub fn parse_summary_every(s: &str) -> Result<Duration, String> {
    let m: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of minutes"))?;
    if !(m > 0.0 && m <= MAX_SUMMARY_MINUTES) {
        return Err(format!(
            "the summary interval must be more than 0 and at most {MAX_SUMMARY_MINUTES} minutes"
        ));
    }
    let d = Duration::from_secs_f64(m * 60.0);
    if d < Duration::from_millis(100) {
        return Err("the summary interval must be at least 0.1 s (0.002 minutes)".into());
    }
    Ok(d)
}

/// The valid fault kinds, comma-separated.
pub fn valid_injections() -> String {
    Inject::ALL[1..]
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--inject KIND[,vcpu=K][,round=R][,iter=I][,cycles=C]`.
pub fn parse_inject(s: &str) -> Result<Injection, String> {
    let mut parts = s.split(',');
    let kind_name = parts.next().unwrap_or_default().trim();
    let kind = Inject::from_name(kind_name)
        .filter(|k| *k != Inject::None)
        .ok_or_else(|| format!("unknown fault '{kind_name}'; valid: {}", valid_injections()))?;
    let mut inj = Injection {
        kind,
        vcpu: 0,
        round: 0,
        iteration: 0,
        cycles: 0,
    };
    for part in parts {
        let (key, value) = part.split_once('=').ok_or_else(|| {
            format!("'{part}' is not KEY=VALUE; use vcpu=, round=, iter= or cycles=")
        })?;
        let number = |what: &str| -> Result<u64, String> {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{what}='{value}' is not a whole number"))
        };
        let small = |what: &str| -> Result<u32, String> {
            u32::try_from(number(what)?).map_err(|_| format!("{what}={value} is too large"))
        };
        match key.trim() {
            "vcpu" => inj.vcpu = small("vcpu")?,
            "round" => inj.round = small("round")?,
            "iter" => inj.iteration = small("iter")?,
            "cycles" => inj.cycles = number("cycles")?,
            other => {
                return Err(format!(
                    "unknown key '{other}'; use vcpu=, round=, iter= or cycles="
                ))
            }
        }
    }
    if inj.iteration >= ITERATIONS {
        return Err(format!(
            "iter={} is out of range; the rendezvous has iterations 0..={}",
            inj.iteration,
            ITERATIONS - 1
        ));
    }
    if kind == Inject::Delay && inj.cycles == 0 {
        return Err("delay needs a number of cycles, e.g. delay,vcpu=1,cycles=1000000".into());
    }
    Ok(inj)
}

/// `--timeout SECS`: a positive number of seconds, at most 10^7.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let t: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(t > 0.0 && t <= 1e7) {
        return Err("the timeout must be a positive number of seconds".into());
    }
    Ok(Duration::from_secs_f64(t))
}

/// `--backend kvm|host`.
pub fn parse_backend(s: &str) -> Result<Backend, String> {
    Backend::from_name(s).ok_or_else(|| {
        format!(
            "unknown backend '{s}'; valid: {}",
            Backend::ALL.map(Backend::name).join(", ")
        )
    })
}

/// The longest window `--linux-windows` accepts, ms.
pub const MAX_WINDOW_MS: u64 = 60_000;

/// `--linux-windows FIRST_MS,REST_MS`: two whole numbers of milliseconds,
/// 1..=[`MAX_WINDOW_MS`] each.
pub fn parse_windows(s: &str) -> Result<(u64, u64), String> {
    let Some((first, rest)) = s.split_once(',') else {
        return Err(format!(
            "'{s}' is not FIRST_MS,REST_MS; give two windows in ms, e.g. 20,2 (Linux's)"
        ));
    };
    let ms = |what: &str, v: &str| -> Result<u64, String> {
        let n: u64 = v
            .trim()
            .parse()
            .map_err(|_| format!("{what} '{v}' is not a whole number of ms"))?;
        if !(1..=MAX_WINDOW_MS).contains(&n) {
            return Err(format!(
                "{what} must be 1..={MAX_WINDOW_MS} ms (a run of Linux's sync lasts one window)"
            ));
        }
        Ok(n)
    };
    Ok((ms("FIRST_MS", first)?, ms("REST_MS", rest)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_and_unknown_ones_name_the_valid_ones() {
        assert_eq!(parse_backend("kvm"), Ok(Backend::Kvm));
        assert_eq!(parse_backend("host"), Ok(Backend::Host));
        let e = parse_backend("xen").expect_err("unknown");
        assert!(e.contains("valid: kvm, host"), "{e}");
    }

    #[test]
    fn durations_parse_with_their_units_and_add_up() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs_f64());
        assert_eq!(secs("30s"), Ok(30.0));
        assert_eq!(secs("90m"), Ok(5_400.0));
        assert_eq!(secs("8h"), Ok(28_800.0));
        assert_eq!(secs("1h30m"), Ok(5_400.0));
        assert_eq!(secs("1h 30m 15s"), Ok(5_415.0));
        assert_eq!(secs("1.5d"), Ok(129_600.0));
        assert_eq!(secs("2 minutes"), Ok(120.0));
        assert_eq!(secs("250ms"), Ok(0.25));
        assert_eq!(secs("30d"), Ok(2_592_000.0));
    }

    #[test]
    fn durations_that_cannot_be_honoured_say_why() {
        for (bad, words) in [
            ("0s", "runs nothing"),
            ("0", "no unit"),
            ("", "empty"),
            ("45", "no unit"),
            ("8x", "unknown unit 'x'"),
            ("h", "not a duration"),
            ("31d", "at most 30d"),
            ("1e9h", "unknown unit 'e'"),
            ("99999999999999999999d", "at most 30d"),
            ("-5s", "not a duration"),
        ] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains(words), "{bad}: {e}");
        }
    }

    #[test]
    fn rounds_beyond_the_counter_are_refused_with_the_limit() {
        assert_eq!(parse_rounds("4294967295"), Ok(u32::MAX));
        assert_eq!(parse_rounds("007"), Ok(7));
        let e = parse_rounds("4294967296").expect_err("33 bits");
        assert!(e.contains("at most 4294967295"), "{e}");
        let e = parse_rounds("100000000000000000000000").expect_err("huge");
        assert!(e.contains("32-bit round counter"), "{e}");
        assert!(parse_rounds("0")
            .expect_err("0")
            .contains("at least one round"));
        assert!(parse_rounds("1e6")
            .expect_err("1e6")
            .contains("not a whole number"));
        assert!(parse_rounds("-1").is_err());
    }

    #[test]
    fn summary_intervals_are_positive_minutes() {
        assert_eq!(parse_summary_every("10"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_summary_every("0.5"), Ok(Duration::from_secs(30)));
        for bad in ["0", "-1", "x", "43201", "0.0001", "inf", "NaN"] {
            assert!(parse_summary_every(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn windows_parse_and_bad_ones_name_the_fix() {
        assert_eq!(parse_windows("20,2"), Ok((20, 2)));
        assert_eq!(parse_windows(" 5 , 60000"), Ok((5, 60_000)));
        for (bad, words) in [
            ("20", "FIRST_MS,REST_MS"),
            ("20,x", "REST_MS 'x'"),
            ("0,2", "FIRST_MS must be 1..="),
            ("20,60001", "REST_MS must be"),
            ("-1,2", "whole number"),
        ] {
            let e = parse_windows(bad).expect_err(bad);
            assert!(e.contains(words), "{bad}: {e}");
        }
    }
}
