#!/usr/bin/env bash
# run-in-qemu.sh: run statically linked programs against a *real* (SVM) /dev/kvm
# inside QEMU. The harness is tools/realkvm (a Python package): this is
# `realkvm boot --machine qemu-svm`, with every option of `realkvm boot --help`.
exec python3 "$(dirname "$0")/../realkvm/realkvm" boot --machine qemu-svm "$@"
