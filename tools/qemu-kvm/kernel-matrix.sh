#!/usr/bin/env bash
# kernel-matrix.sh: tsc-rendezvous on real KVM across kernels (and machines), one
# boot per kernel, judged by the expectations. The harness is tools/realkvm (a
# Python package): this is `realkvm matrix`, with every option of its --help.
exec python3 "$(dirname "$0")/../realkvm/realkvm" matrix "$@"
