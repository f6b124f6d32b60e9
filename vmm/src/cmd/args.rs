//! Value parsers shared by the subcommands' options: each refuses a bad value
//! with a message naming the problem and the fix (clap exits 2 with it).

use std::time::Duration;

use tsc_contract::{layout, Inject, Variant};
use tsc_sync::ITERATIONS;

use crate::options::{Backend, Injection};

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

/// `--rounds`: at least one.
pub fn parse_rounds(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    if n == 0 {
        return Err("at least one round is needed; use --rounds 1 or more".into());
    }
    Ok(n)
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
