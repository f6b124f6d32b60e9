"""The subcommands of `tools/realkvm/realkvm`."""

import sys

USAGE = """\
Usage: realkvm COMMAND [options]

Real KVM (kvm_amd, kvm_intel) inside emulated machines, on a host without VMX/SVM.

Commands:
  boot          run a static program or a script against the real /dev/kvm of one
                boot (tools/qemu-kvm/run-in-qemu.sh)
  matrix        the kernel matrix: build tsc-rendezvous and its real-VM tests
                statically, boot each kernel once, judge what came back
                (tools/qemu-kvm/kernel-matrix.sh)
  build-kernel  build a small kernel with kvm_amd and kvm_intel from Debian's
                linux-source or a tree (tools/qemu-kvm/build-kernel.sh)
  judge         judge an artefact directory of the matrix again: judge DIR KERNEL...
  variants      the tool on kernels whose KVM was changed on purpose (the fix of the
                stale kvmclock page, mutants): every verdict against its declaration
  variant-judge judge a variants run's artefacts again: variant-judge DIR MACHINE...
  machines      list the machines of machines.toml

`realkvm COMMAND --help` for each command's options.
"""


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        (sys.stdout if argv else sys.stderr).write(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "boot":
        from . import boot

        return boot.main(rest)
    if cmd == "matrix":
        from . import matrix

        return matrix.main(rest)
    if cmd == "build-kernel":
        from .kernels import build

        return build.main(rest)
    if cmd == "judge":
        from . import expectations

        return expectations.main(["judge"] + rest)
    if cmd == "variants":
        from . import variant_run

        return variant_run.main(rest)
    if cmd == "variant-judge":
        from . import variant_judge

        return variant_judge.main(rest)
    if cmd == "machines":
        from . import machines

        for name, s in machines.specs().items():
            print(f"{name:18} {s.emulator:6} {s.vendor}  {s.kvm_module:10} cpu {s.cpu:20} max_cpus {s.max_cpus:<3} {s.description}")
        return 0
    sys.stderr.write(f"realkvm: unknown command '{cmd}'\n\n{USAGE}")
    return 2
