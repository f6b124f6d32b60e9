//! Links the guest as a static, non-PIE ELF at the address of `guest.ld`,
//! without the C runtime.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    for arg in [
        "-nostartfiles",
        "-nostdlib",
        "-static",
        "-no-pie",
        "-Wl,--build-id=none",
    ] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
    println!("cargo:rustc-link-arg-bins=-T{dir}/guest.ld");
    println!("cargo:rerun-if-changed=guest.ld");
    println!("cargo:rerun-if-changed=build.rs");
}
