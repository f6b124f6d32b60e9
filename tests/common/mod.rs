//! Helpers shared by the integration tests.

#[allow(dead_code)]
pub mod docs;
#[allow(dead_code)]
pub mod interrupt;
#[allow(dead_code)]
pub mod ktap;
#[allow(dead_code)]
pub mod raw_kvm;
#[allow(dead_code)]
pub mod validators;

/// Whether /dev/kvm is usable. Without it a KVM test is skipped with a
/// message, except when `CI` is set: then this panics, so that CI can never
/// pass by skipping the tests that need KVM.
#[allow(dead_code)]
pub fn kvm_or_skip() -> bool {
    kvm_usable_or_skip(
        std::path::Path::new("/dev/kvm"),
        std::env::var_os("CI").is_some(),
    )
}

/// [`kvm_or_skip`] for the device at `path`, `ci` saying whether `CI` is
/// set.
#[allow(dead_code)]
pub fn kvm_usable_or_skip(path: &std::path::Path, ci: bool) -> bool {
    let ok = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .is_ok();
    if !ok {
        if ci {
            panic!(
                "CI is set but {} is not usable: the KVM tests must run in CI",
                path.display()
            );
        }
        eprintln!(
            "skipping: {} is not usable (set CI to make this a failure)",
            path.display()
        );
    }
    ok
}

/// How long the VMM may take to join its vCPU threads once it stopped them
/// (the watchdog, a signal): "joins every thread within 5 s" (README, "The
/// watchdog").
#[allow(dead_code)]
pub const JOIN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest a test waits for a run whose own deadline is `timeout`
/// (its `--timeout`, or the default watchdog): the deadline plus the join
/// grace, three times over. Generous on purpose, so that a loaded machine
/// cannot make it flaky; it exists only so that a hang fails the test
/// instead of blocking the suite.
#[allow(dead_code)]
pub fn hang_bound(timeout: std::time::Duration) -> std::time::Duration {
    (timeout + JOIN_GRACE) * 3
}

/// Waits for `child` at most `bound` (see [`hang_bound`]), killing it and
/// failing the test when it is still running then; returns its output.
#[allow(dead_code)]
pub fn wait_bounded(
    mut child: std::process::Child,
    bound: std::time::Duration,
    what: &str,
) -> std::process::Output {
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() > bound => {
                let _ = child.kill();
                let out = child.wait_with_output();
                let err = out
                    .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default();
                panic!("{what}: still running after {bound:?} (a hang); stderr: {err}");
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => panic!("{what}: waitpid failed: {e}"),
        }
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{what}: cannot collect the output: {e}"))
}

/// The KVM module this host runs, read from /sys/module independently of the
/// VMM's own detection (PVM first: it may be loaded next to kvm_intel).
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// kvm_pvm.
    Pvm,
    /// kvm_intel.
    Vmx,
    /// kvm_amd.
    Svm,
    /// None of them.
    Unknown,
}

/// See [`Flavor`].
#[allow(dead_code)]
pub fn flavor() -> Flavor {
    let loaded = |m: &str| std::path::Path::new("/sys/module").join(m).exists();
    if loaded("kvm_pvm") {
        Flavor::Pvm
    } else if loaded("kvm_intel") {
        Flavor::Vmx
    } else if loaded("kvm_amd") {
        Flavor::Svm
    } else {
        Flavor::Unknown
    }
}

/// The instructions of the embedded guest's executable segments, decoded
/// from the ELF (program headers parsed here, not by the VMM).
#[allow(dead_code)]
pub fn guest_code() -> Vec<iced_x86::Instruction> {
    let elf = tsc_vmm::EMBEDDED;
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes([elf[o], elf[o + 1], elf[o + 2], elf[o + 3]]);
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&elf[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let (phoff, phnum) = (u64_at(32) as usize, usize::from(u16_at(56)));
    let mut out = Vec::new();
    for o in (0..phnum).map(|i| phoff + i * 56) {
        // PT_LOAD with PF_X.
        if u32_at(o) != 1 || u32_at(o + 4) & 1 == 0 {
            continue;
        }
        let (off, vaddr, filesz) = (u64_at(o + 8) as usize, u64_at(o + 16), u64_at(o + 32));
        let code = &elf[off..off + filesz as usize];
        let decoder = iced_x86::Decoder::with_ip(64, code, vaddr, iced_x86::DecoderOptions::NONE);
        out.extend(decoder);
    }
    out
}

/// A register's value in a VMM error message (`name=0x...`), if present.
#[allow(dead_code)]
pub fn register_in(message: &str, name: &str) -> Option<u64> {
    let key = format!("{name}=0x");
    let (at, _) = message.match_indices(&key).find(|(i, _)| {
        message[..*i]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric())
    })?;
    let hex: String = message[at + key.len()..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u64::from_str_radix(&hex, 16).ok()
}

/// Asserts that `doc` is valid against the JSON Schema `schema` (the text of
/// one of `vmm/schema/*.json`), listing every violation.
#[allow(dead_code)]
pub fn validate(doc: &serde_json::Value, schema: &str) {
    let schema: serde_json::Value = serde_json::from_str(schema).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

/// A `compare --json` document's measured rounds, over every variant.
#[allow(dead_code)]
pub fn measured_rounds(doc: &serde_json::Value) -> u64 {
    doc["per_variant"]
        .as_array()
        .expect("per_variant")
        .iter()
        .filter_map(|v| v["rounds"].as_u64())
        .sum()
}

/// The reference statistics recorded once from SciPy/NumPy
/// (`tests/fixtures/stats_reference.json`), and a list of its numbers.
#[allow(dead_code)]
pub mod stats_fixture {
    use serde_json::Value;

    /// The whole fixture.
    pub fn load() -> Value {
        serde_json::from_str(include_str!("../fixtures/stats_reference.json"))
            .expect("the fixture is JSON")
    }

    /// `v`, an array of numbers, as numbers.
    pub fn values(v: &Value) -> Vec<f64> {
        v.as_array()
            .expect("an array of values")
            .iter()
            .map(|x| x.as_f64().expect("a number"))
            .collect()
    }
}

/// A command's stdout as JSON, or a panic showing what it printed instead.
#[allow(dead_code)] // each test binary uses its own part of common
pub fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
