//! Builds the freestanding guest (its own cargo workspace under `guest/`) and
//! hands its ELF to the VMM, which embeds it with `include_bytes!`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest_dir
        .parent()
        .expect("vmm/ has a parent")
        .to_path_buf();
    let guest_dir = root.join("guest");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    let target_dir = out_dir.join("guest-target");

    for dir in ["guest/src", "contract/src", "sync/src"] {
        rerun_for_tree(&root.join(dir));
    }
    for file in [
        "guest/Cargo.toml",
        "guest/build.rs",
        "guest/guest.ld",
        "guest/.cargo/config.toml",
        "contract/Cargo.toml",
        "sync/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(file).display());
    }

    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&guest_dir)
        .args(["build", "--release", "--locked", "--target-dir"])
        .arg(&target_dir);
    // The outer build's settings (target, flags, profile, jobserver) must not
    // leak into the guest's: keep only what locates the toolchain.
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let keep = matches!(
            key.as_str(),
            "CARGO_HOME" | "RUSTUP_HOME" | "RUSTUP_TOOLCHAIN"
        );
        if !keep && (key.starts_with("CARGO") || key.starts_with("RUST")) {
            cmd.env_remove(&key);
        }
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("could not run cargo to build the guest: {e}"));
    if !status.success() {
        panic!(
            "building the guest in {} failed: {status}",
            guest_dir.display()
        );
    }
    let elf = target_dir.join("release").join("tsc-guest");
    println!("cargo:rustc-env=TSC_GUEST_ELF={}", elf.display());
}

fn rerun_for_tree(dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                rerun_for_tree(&path);
            } else {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
