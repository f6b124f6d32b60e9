#!/usr/bin/env bash
# build-kernel.sh: a small kernel with kvm, kvm_amd and kvm_intel from Debian's
# linux-source (or a tree), for run-in-qemu.sh --kernel / kernel-matrix.sh --kernel.
# The harness is tools/realkvm (a Python package): this is `realkvm build-kernel`.
exec python3 "$(dirname "$0")/../realkvm/realkvm" build-kernel "$@"
