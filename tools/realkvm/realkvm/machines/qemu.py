"""QEMU's TCG with AMD SVM (`-cpu max`): the guest loads kvm_amd.

- thread=multi (the options' default): every emulated CPU on its own host
  thread, so the vCPUs of the KVM guests inside really run at the same time.
  With QEMU 7.2 it hung now and then in kvm_destroy_vm; with QEMU 10.0 no
  hang or panic in 60 boots (tools/qemu-kvm/measurements.md). On a host
  release named in `qemu_from_backports_on` QEMU is installed (or upgraded)
  from its -backports; with a QEMU older than `tcg_multi_min_major`, multi
  falls back to single.
- -cpu max: exposes SVM (and more) to the guest; kvm_amd needs it.
- tsc=reliable: with -smp >= 2 the emulated kernel otherwise marks its TSC
  unstable and KVM then rewrites vCPU TSC offsets behind the program's back.
- -display none -vga none -serial stdio -monitor none instead of -nographic:
  the same headless machine with the serial port on stdout, but SeaBIOS then
  does not use the serial port as its console (no terminal-reset escapes in
  the log) and no monitor is multiplexed on stdio.
- -nic none: no network is wanted, and skipping the NIC skips its option ROM.
- stdin from /dev/null: QEMU would put a terminal on stdin into raw mode.
"""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

from ..errors import EX_USAGE, Fail
from .base import Boot, BootResult, Machine

BINARY = "qemu-system-x86_64"


def qemu_version():
    """"10.0.2" from `qemu-system-x86_64 --version`, "" without QEMU."""
    try:
        out = subprocess.run([BINARY, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return ""
    words = (out.splitlines() or [""])[0].split()
    return words[3] if len(words) > 3 else ""


def major(version):
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


def follow(path, proc, on_output, poll_s=0.2):
    """Calls on_output with each complete line appended to `path` while `proc`
    runs, and with what is left once it has ended."""
    with open(path, "rb") as f:
        pending = b""
        while True:
            done = proc.poll() is not None
            chunk = f.read()
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if on_output:
                    for line in lines:
                        on_output(line.decode("utf-8", "replace") + "\n")
            elif done:
                break
            else:
                time.sleep(poll_s)
        if pending and on_output:
            on_output(pending.decode("utf-8", "replace"))


class QemuMachine(Machine):
    power_off_delay_s = 0.2

    def __init__(self, spec):
        super().__init__(spec)
        self.tcg_thread = spec.options.get("tcg_thread", "multi")
        self.multi_min = int(spec.options.get("tcg_multi_min_major", 10))
        if self.tcg_thread not in ("single", "multi"):
            raise Fail(EX_USAGE, f"--tcg-thread must be single or multi (got '{self.tcg_thread}')")

    def packages(self):
        # seabios (needed for -kernel) is a hard dependency of qemu-system-x86.
        return ["qemu-system-x86"]

    def cmdline(self):
        return "console=ttyS0 tsc=reliable"

    def accepts(self, cpus):
        if cpus > self.spec.max_cpus:
            return False, f"machine {self.spec.name} boots with at most {self.spec.max_cpus} CPUs"
        return True, ""

    def prepare_host(self, host):
        """QEMU from the host release's backports where its own is too old
        for thread=multi; falls back to single if it stays too old."""
        backports = host.codename() in self.spec.options.get("qemu_from_backports_on", [])

        def install():
            target = []
            if backports:
                host.enable_backports(host.codename())
                target = ["-t", f"{host.codename()}-backports"]
            # Say loudly if apt would remove something rather than let it pass in
            # the apt noise (bookworm's own QEMU 7.2 would remove qemu-utils 10).
            removals = host.simulate_removals(self.packages(), target)
            if removals:
                host.log(f"warning: installing qemu-system-x86 makes apt REMOVE: {' '.join(removals)}")
            host.install(*self.packages(), target=target)

        if shutil.which(BINARY) is None:
            install()
        elif self.tcg_thread == "multi" and major(qemu_version()) < self.multi_min:
            host.log(f"QEMU {major(qemu_version())}.x is older than {self.multi_min}, the first whose thread=multi was measured reliable: upgrading")
            install()
        if self.tcg_thread == "multi" and major(qemu_version()) < self.multi_min:
            host.log(f"warning: QEMU {major(qemu_version())}.x hung with thread=multi before; falling back to thread=single (see --tcg-thread)")
            self.tcg_thread = "single"

    def command(self, boot: Boot):
        return [
            BINARY, "-accel", f"tcg,thread={self.tcg_thread}", "-cpu", self.spec.cpu,
            "-smp", str(boot.cpus), "-m", str(boot.mem_mb),
            "-display", "none", "-vga", "none", "-serial", "stdio", "-monitor", "none",
            "-no-reboot", "-nic", "none",
            "-kernel", str(boot.kernel), "-initrd", str(boot.initrd), "-append", boot.cmdline,
        ]

    def boot(self, boot, on_output=None):
        cmd = self.command(boot)
        (boot.workdir / "qemu-cmdline.txt").write_text(shlex.join(cmd) + "\n")
        version = qemu_version()
        print(f"realkvm: QEMU {version or '?'} (TCG thread={self.tcg_thread}, -cpu {self.spec.cpu})", file=sys.stderr, flush=True)
        err_path = boot.workdir / "qemu-stderr.txt"
        t0 = time.monotonic()
        timed_out = threading.Event()
        # QEMU writes the serial console straight into the log file, which a thread
        # of ours follows for on_output (as `tail -f` did): a console reader that
        # falls behind on a loaded host can never make the guest's UART wait.
        with open(boot.serial_log, "wb") as log, open(err_path, "wb") as err:
            # A session of its own: a Ctrl-C on the terminal reaches the harness,
            # which stops QEMU, instead of QEMU directly.
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=err, start_new_session=True)

            def stop(sig):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass

            def at_limit():
                timed_out.set()
                stop(signal.SIGTERM)
                # As timeout -k 10: SIGKILL if it is still there 10 s later.
                threading.Timer(10, lambda: proc.poll() is None and stop(signal.SIGKILL)).start()

            timer = threading.Timer(boot.timeout_s, at_limit)
            timer.daemon = True
            follower = threading.Thread(target=follow, args=(boot.serial_log, proc, on_output), daemon=True)
            timer.start()
            follower.start()
            try:
                rc = proc.wait()
            finally:
                timer.cancel()
                if proc.poll() is None:
                    stop(signal.SIGTERM)
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        stop(signal.SIGKILL)
                        proc.wait()
                follower.join(5)
        seconds = time.monotonic() - t0
        # QEMU's own messages ("terminating on signal 15") stay out of the program's output.
        for line in err_path.read_text(errors="replace").splitlines():
            print(f"qemu: {line}", file=sys.stderr)
        return BootResult(
            exit_status=124 if timed_out.is_set() else rc,
            timed_out=timed_out.is_set(),
            seconds=seconds,
            emulator_version=f"QEMU {version}" if version else "QEMU",
            notes=[f"qemu_version={version}", f"tcg_thread={self.tcg_thread}"],
        )


MACHINE_CLASS = QemuMachine
