//! The ecosystem's own validators, as `.ci/run` installs them (its step "the
//! ecosystem's validators"): KernelCI's `kcidb-io` in the `target/ci-lint`
//! venv, `promtool` from Debian's `prometheus`, LAVA's schemas from Debian's
//! `lava-common` (under Debian's own Python), the kernel's kselftest runner
//! and LAVA's `lava-test-case` unpacked into `target/ci-lint`. A test that
//! needs one that is missing skips with a message saying how to install it,
//! except when `CI` is set: then it fails, as the KVM tests do without
//! `/dev/kvm`, so that CI can never pass by skipping a validator.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where `.ci/run` installs the validators it does not install system-wide.
pub fn ci_lint() -> PathBuf {
    root().join("target/ci-lint")
}

/// One validator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validator {
    /// KernelCI's `kcidb-io` (PyPI) in the `target/ci-lint` venv.
    KcidbIo,
    /// `promtool` (Debian's `prometheus`).
    Promtool,
    /// LAVA's `lava_common.schemas` (Debian's `lava-common`).
    LavaCommon,
    /// The kernel's `run_kselftest.sh` and `kselftest/runner.sh`
    /// (`tools/kselftest/install-runner.sh`).
    KselftestRunner,
    /// LAVA's `lava-test-case` (`tools/lava/install-test-shell.sh`).
    LavaTestCase,
    /// `systemd-analyze` (systemd).
    SystemdAnalyze,
}

/// Debian's own Python, which has the `python3-*` packages (`lava-common`).
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

impl Validator {
    /// Its name and how `.ci/run` installs it, for the skip or failure
    /// message.
    pub fn describe(self) -> &'static str {
        match self {
            Self::KcidbIo => {
                "kcidb-io (target/ci-lint/bin/pip install kcidb-io==141, as .ci/run does)"
            }
            Self::Promtool => "promtool (apt-get install prometheus, as .ci/run does)",
            Self::LavaCommon => "lava_common (apt-get install lava-common, as .ci/run does)",
            Self::KselftestRunner => {
                "the kselftest runner (bash tools/kselftest/install-runner.sh, as .ci/run does)"
            }
            Self::LavaTestCase => {
                "lava-test-case (bash tools/lava/install-test-shell.sh, as .ci/run does)"
            }
            Self::SystemdAnalyze => "systemd-analyze (apt-get install systemd)",
        }
    }

    /// The program (or the directory, for the kselftest runner and
    /// lava-test-case) when it is installed and works.
    pub fn locate(self) -> Option<PathBuf> {
        match self {
            Self::KcidbIo => {
                let python = ci_lint().join("bin/python");
                works(Command::new(&python).args(["-c", "import kcidb_io"])).then_some(python)
            }
            Self::Promtool => {
                on_path("promtool").filter(|p| works(Command::new(p).arg("--version")))
            }
            Self::LavaCommon => works(Command::new(SYSTEM_PYTHON).args([
                "-c",
                "import yaml, lava_common.schemas, lava_common.schemas.test.testdef",
            ]))
            .then(|| PathBuf::from(SYSTEM_PYTHON)),
            Self::KselftestRunner => {
                let dir = ci_lint().join("kselftest");
                let ok = dir.join("run_kselftest.sh").is_file()
                    && dir.join("kselftest/runner.sh").is_file();
                ok.then_some(dir)
            }
            Self::LavaTestCase => {
                let dir = ci_lint().join("lava-test-shell/bin");
                dir.join("lava-test-case").is_file().then_some(dir)
            }
            Self::SystemdAnalyze => {
                on_path("systemd-analyze").filter(|p| works(Command::new(p).arg("--version")))
            }
        }
    }
}

/// `cmd` runs and exits 0.
fn works(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}

/// `name` in one of `PATH`'s directories.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// [`Validator::locate`], or `None` after a message saying it is skipped;
/// with `CI` set a missing validator panics instead.
pub fn or_skip(v: Validator) -> Option<PathBuf> {
    found_or_skip(v, v.locate(), std::env::var_os("CI").is_some())
}

/// [`or_skip`] for a validator found at `found`, `ci` saying whether `CI`
/// is set.
pub fn found_or_skip(v: Validator, found: Option<PathBuf>, ci: bool) -> Option<PathBuf> {
    if found.is_none() {
        if ci {
            panic!(
                "CI is set but {} is missing: the routes' tests must run in CI",
                v.describe()
            );
        }
        eprintln!(
            "skipping: {} is missing (set CI to make this a failure)",
            v.describe()
        );
    }
    found
}

/// Runs `cmd`, panicking with `what` when it cannot start.
pub fn run(cmd: &mut Command, what: &str) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"))
}

/// Asserts that `out` exited 0, showing its output otherwise.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
