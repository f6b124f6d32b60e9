"""Exit codes and the one error type of the harness.

The codes are the ones `tools/qemu-kvm/run-in-qemu.sh` always had; every
subcommand reports a failure by raising `Fail(code, message)`, which the
entry point prints as `PROG: error: MESSAGE` and exits with.
"""

import sys

EX_USAGE = 2  # bad command line (also: --kernel/--modules/--file/--script paths)
EX_BADBIN = 3  # program missing or not a static x86-64 ELF
EX_HOST = 4  # host-side setup failed (packages, kernel download, initramfs)
EX_GUEST = 97  # inside the guest: a module did not load or /dev/kvm is missing
EX_TIMEOUT = 124  # same as timeout(1)
EX_NOMARK = 125  # the emulator ended without the exit marker (kernel panic, emulator error)


class Fail(Exception):
    """A failure with the exit code the command ends with."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class Log:
    """`PROG: message` lines on stderr."""

    def __init__(self, prog):
        self.prog = prog

    def __call__(self, *words):
        print(f"{self.prog}: {' '.join(str(w) for w in words)}", file=sys.stderr, flush=True)

    def error(self, message):
        self(f"error: {message}")
