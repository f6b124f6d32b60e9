//! Helpers shared by the integration tests.

#[allow(dead_code)]
pub mod ktap;

/// Whether /dev/kvm is usable. Without it a KVM test is skipped with a
/// message, except when `CI` is set: then this panics, so that CI can never
/// pass by skipping the tests that need KVM.
pub fn kvm_or_skip() -> bool {
    let ok = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but /dev/kvm is not usable: the KVM tests must run in CI");
        }
        eprintln!("skipping: /dev/kvm is not usable (set CI to make this a failure)");
    }
    ok
}
