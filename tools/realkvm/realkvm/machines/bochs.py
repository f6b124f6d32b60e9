"""Bochs 2.7 with Intel VMX emulation: the guest loads kvm_intel.

Debian's `bochs` package is built with VMX (and with the internal debugger,
and without a `nogui` display). A boot here is:

- an isolinux ISO in `boot.workdir` (xorriso, isolinux, syslinux-common)
  holding the kernel, the harness's initramfs and the command line, on
  `ata0-master: type=cdrom` with `boot: cdrom` (Bochs has no -kernel);
- a bochsrc (see `bochsrc()`): the CPU model of the machine, `clock:
  sync=none` (time advances per emulated instruction, so runs are
  deterministic), the serial port in file mode straight into
  `boot.serial_log`, `display_library: rfb, options="timeout=0"` (Debian's
  build has no `nogui`; each Bochs listens on the first free TCP port from
  5900 on, so several can run at once), the speaker off and the sound
  drivers `dummy` (otherwise Bochs aborts with "buffer overflow detected"
  when ALSA finds no sound card);
- `bochs -q -f bochsrc -rc debugger.rc` with `c` in debugger.rc: the
  compiled-in debugger stops at a prompt before the first instruction, and
  the rc file answers it;
- the end: the guest's /init powers off (sysrq o -> ACPI S5), Bochs logs
  "ACPI control: soft power off" as a panic and exits with status 1, which
  is reported as 0 (a clean power-off) with the raw status in the notes. At
  the wall-clock limit, on SIGINT/SIGTERM of the harness, or on any
  exception, Bochs (its own process group) gets SIGINT: the debugger stops
  the CPU, finds EOF on its stdin and quits (status 1, bochs.log flushed,
  the CPU's position in bochs-stdout.txt, reported as a note); SIGTERM and
  then SIGKILL follow, 5 s apart, if it is still there.

Bochs' TSC is its instruction counter (one tick per emulated instruction,
`ips` ticks per emulated second for the devices: PIT, HPET, serial baud
rate). tigerlake and corei7_skylake_x publish a TSC frequency in CPUID
0x15/0x16 (2419.2 MHz, 3.5 GHz) that Linux takes without calibrating, so
there the guest's TSC-based time and its device time differ by
(that frequency)/ips; corei7_haswell_4770 has no such leaves and Linux
calibrates the TSC against the PIT (tsc_khz = ips/1000). Hence the default
`ips` (option `ips`): 4M (Bochs' own) on the two CPUID models, where it changes
neither tsc_khz nor the host time of a fixed guest work but a larger one slows
the boot; 2.4192e9 on calibrated models, where 4M makes a 4 MHz guest. Measured
facts: tools/realkvm/BOCHS.md.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from .base import Boot, BootResult, Machine

BOCHS = "bochs"  # Debian's wrapper: `exec bochs-bin -q "$@"`
BIOS = "/usr/share/bochs/BIOS-bochs-latest"
VGABIOS = "/usr/share/vgabios/vgabios.bin"
ISOLINUX_BIN = "/usr/lib/ISOLINUX/isolinux.bin"
LDLINUX_C32 = "/usr/lib/syslinux/modules/bios/ldlinux.c32"

#: CPU models of Bochs 2.7 that offer VMX (the three measured, see BOCHS.md).
VMX_MODELS = ("tigerlake", "corei7_skylake_x", "corei7_haswell_4770")
DEFAULT_IPS = 4_000_000  # Bochs' own default
#: For a model that Linux calibrates (no CPUID TSC frequency) ips *is* the TSC
#: rate (tsc_khz = ips / 1000): at 4M the guest is a 4 MHz machine whose default
#: `tsc-rendezvous check` times out (BOCHS.md). This gives it tigerlake's 2.4192 GHz.
CALIBRATED_IPS = 2_419_200_000
#: The TSC frequency (Hz) a CPU model publishes in CPUID 0x15/0x16, which Linux
#: takes as tsc_khz without calibrating; absent: Linux calibrates (tsc = ips).
CPUID_TSC_HZ = {"tigerlake": 2_419_200_000, "corei7_skylake_x": 3_499_912_000}
#: What may still sit in the guest's UART transmit buffer when /init's last
#: echo returns: Linux's serial xmit buffer is one page.
UART_XMIT_BYTES = 4096
DISPLAY = 'rfb, options="timeout=0"'
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL this much later
POLL_S = 0.2  # how often the serial file is read
ACPI_POWER_OFF = "ACPI control: soft power off"


class BootInterrupted(BaseException):
    """SIGTERM/SIGHUP arrived while no handler of the harness was installed."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def bochs_version() -> str:
    """"2.7" from the installed package, "" if unknown."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "bochs"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    m = re.match(r"(?:\d+:)?(\d+(?:\.\d+)+)", out.strip())
    return m.group(1) if m else ""


def bochsrc_quote(path) -> str:
    p = str(path)
    if '"' in p or "\n" in p:
        raise ValueError(f"path unusable in a bochsrc: {p!r}")
    return f'"{p}"'


def _positive_int(options, key, default):
    v = options.get(key, default)
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise ValueError(f"bochs option {key} must be an integer, got {v!r}") from None
    if n <= 0:
        raise ValueError(f"bochs option {key} must be positive, got {n}")
    return n


def default_ips(cpu: str) -> int:
    """4M (Bochs' default, the cheapest boot) where CPUID fixes tsc_khz anyway;
    CALIBRATED_IPS where ips becomes tsc_khz."""
    return DEFAULT_IPS if cpu in CPUID_TSC_HZ else CALIBRATED_IPS


def guest_seconds_per_device_second(cpu: str, ips: int) -> float:
    """How many seconds of the guest kernel's (TSC-based) time one second of
    Bochs' device time (PIT, HPET, the UART's baud rate) is."""
    f = CPUID_TSC_HZ.get(cpu)
    return 1.0 if f is None else ips / f


def power_off_delay(cpu: str, ips: int, baud: int) -> float:
    """Guest seconds for a full UART transmit buffer to drain, doubled, at least
    0.05 s (BOCHS.md: at tigerlake/ips 4M nothing was lost with no delay; at
    ips = the CPUID frequency, where guest and device time agree, the tail was
    lost with no delay and not with 1 s)."""
    drain = UART_XMIT_BYTES * 10 / baud  # 8N1: ten bits a byte
    return round(max(0.05, 2 * drain * guest_seconds_per_device_second(cpu, ips)), 2)


class BochsMachine(Machine):
    # Set per instance from the CPU model, ips and baud rate (power_off_delay()).
    power_off_delay_s = 0.75

    def __init__(self, spec):
        super().__init__(spec)
        o = dict(spec.options or {})
        self.ips = _positive_int(o, "ips", default_ips(spec.cpu))
        if self.ips > 0xFFFFFFFF:
            raise ValueError(f"bochs option ips must fit 32 bits (Bochs' limit), got {self.ips}")
        self.display = str(o.get("display", DISPLAY))
        self.baud = _positive_int(o, "baud", 115200)
        self.binary = str(o.get("bochs", BOCHS))
        self.extra = [str(x) for x in o.get("bochsrc_extra", [])]
        for line in self.extra + [self.display]:
            if "\n" in line:
                raise ValueError(f"bochs option holds a newline: {line!r}")
        self.grace_s = float(o.get("stop_grace_s", STOP_GRACE_S))
        # Bochs' RFB display listens on 0.0.0.0, first free port of 5900-5949: in
        # a network namespace of its own it is reachable from nowhere and two
        # Bochs never compete for ports. Needs root (the harness is).
        self.netns = _truthy(o.get("netns", True))
        if "power_off_delay_s" in o:
            self.power_off_delay_s = float(o["power_off_delay_s"])
        else:
            self.power_off_delay_s = power_off_delay(spec.cpu, self.ips, self.baud)

    # ------------------------------------------------------------------ interface
    def packages(self):
        # bochs pulls bochs-wx (its default GUI plugin); bochsbios and vgabios are
        # its ROMs; isolinux + syslinux-common + xorriso make the boot ISO.
        return ["bochs", "bochsbios", "vgabios", "isolinux", "syslinux-common", "xorriso"]

    def cmdline(self):
        # 115200 baud: Bochs emulates the UART's speed, and at the kernel's default
        # 9600 the console tail was lost at power-off. tsc=reliable: as on QEMU, so
        # that the guest kernel never marks its TSC unstable (with 2 emulated CPUs).
        return f"console=ttyS0,{self.baud} tsc=reliable"

    def accepts(self, cpus):
        if cpus < 1:
            return False, "at least one emulated CPU is needed"
        if cpus > self.spec.max_cpus:
            return False, f"machine {self.spec.name} boots with at most {self.spec.max_cpus} CPUs (see tools/realkvm/BOCHS.md)"
        return True, ""

    # ------------------------------------------------------------------ files
    def full_cmdline(self, boot: Boot) -> str:
        """The harness's command line plus whatever of ours it lacks (Boot.cmdline
        may or may not hold the machine's part already)."""
        have = boot.cmdline.split()
        keys = {w.split("=", 1)[0] for w in have}
        ours = self.cmdline().split()
        if boot.cpus > 1:
            # With 2 emulated tigerlake CPUs, loading kvm_intel never ended: CPU 0
            # spun in smp_call_function_many_cond, CPU 1 sat in mwait_idle (BOCHS.md;
            # a cross-call to a CPU idling in MWAIT is a write to the monitored
            # line, which did not wake it). With idle=nomwait it loads.
            ours.append("idle=nomwait")
        extra = [w for w in ours if w.split("=", 1)[0] not in keys]
        line = " ".join(have + extra)
        if len(line) > 2000:
            raise ValueError("the kernel command line must be at most 2000 characters")
        return line

    def isolinux_cfg(self, cmdline: str) -> str:
        return (
            "DEFAULT linux\nPROMPT 0\nTIMEOUT 0\n"
            "LABEL linux\n  KERNEL /vmlinuz\n  INITRD /initrd.gz\n"
            f"  APPEND {cmdline}\n"
        )

    def iso_tree(self, boot: Boot):
        """{path in the ISO: source file or text} of the boot ISO."""
        return {
            "isolinux/isolinux.bin": Path(ISOLINUX_BIN),
            "isolinux/ldlinux.c32": Path(LDLINUX_C32),
            "isolinux/isolinux.cfg": self.isolinux_cfg(self.full_cmdline(boot)),
            "vmlinuz": Path(boot.kernel),
            "initrd.gz": Path(boot.initrd),
        }

    def xorriso_command(self, tree_dir: Path, iso: Path):
        return [
            "xorriso", "-as", "mkisofs", "-quiet", "-o", str(iso),
            "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat",
            "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table", "-R", "-J", str(tree_dir),
        ]

    def build_iso(self, boot: Boot) -> Path:
        tree_dir = boot.workdir / "iso"
        iso = boot.workdir / "boot.iso"
        shutil.rmtree(tree_dir, ignore_errors=True)
        iso.unlink(missing_ok=True)
        for rel, src in self.iso_tree(boot).items():
            dst = tree_dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, Path):
                if not src.is_file():
                    raise FileNotFoundError(f"{src} is missing (packages: {' '.join(self.packages())})")
                # A hard link where possible: the kernel and initrd are big.
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copyfile(src, dst)
            else:
                dst.write_text(src)
        r = subprocess.run(self.xorriso_command(tree_dir, iso), capture_output=True, text=True)
        shutil.rmtree(tree_dir, ignore_errors=True)
        if r.returncode != 0:
            raise RuntimeError(f"xorriso failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
        return iso

    def bochsrc(self, boot: Boot, iso: Path) -> str:
        q = bochsrc_quote
        lines = [
            "# Written by realkvm (machines/bochs.py).",
            "config_interface: textconfig",
            f"display_library: {self.display}",
            f"memory: guest={boot.mem_mb}, host={boot.mem_mb}",
            f"romimage: file={q(BIOS)}",
            f"vgaromimage: file={q(VGABIOS)}",
            f"cpu: model={self.spec.cpu}, count={boot.cpus}, ips={self.ips}, reset_on_triple_fault=0",
            "pci: enabled=1, chipset=i440fx",
            "ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14",
            f"ata0-master: type=cdrom, path={q(iso)}, status=inserted",
            "boot: cdrom",
            f"com1: enabled=1, mode=file, dev={q(boot.serial_log)}",
            "clock: sync=none, time0=local",
            "mouse: enabled=0",
            "speaker: enabled=0",
            "sound: waveoutdrv=dummy, waveindrv=dummy, midioutdrv=dummy",
            f"log: {q(boot.workdir / 'bochs.log')}",
            # The ACPI power-off is a panic: fatal ends Bochs (status 1).
            "panic: action=fatal",
            "error: action=report",
            "info: action=report",
            "debug: action=ignore",
        ]
        return "\n".join(lines + self.extra) + "\n"

    def command(self, boot: Boot, netns: Optional[bool] = None):
        cmd = [self.binary, "-q", "-f", str(boot.workdir / "bochsrc"), "-rc", str(boot.workdir / "debugger.rc")]
        if self.netns if netns is None else netns:
            # unshare execs Bochs: same pid, so stopping it stops Bochs.
            cmd = ["unshare", "--net", "--"] + cmd
        return cmd

    # ------------------------------------------------------------------ boot
    def boot(self, boot: Boot, on_output: Optional[Callable[[str], None]] = None) -> BootResult:
        boot.workdir.mkdir(parents=True, exist_ok=True)
        try:
            iso = self.build_iso(boot)
            rc_text = self.bochsrc(boot, iso)
        except (OSError, RuntimeError, ValueError) as e:
            raise _host_failure(f"Bochs: preparing the boot failed: {e}") from None
        (boot.workdir / "bochsrc").write_text(rc_text)
        (boot.workdir / "debugger.rc").write_text("c\n")
        (boot.workdir / "bochs.log").unlink(missing_ok=True)
        boot.serial_log.parent.mkdir(parents=True, exist_ok=True)
        boot.serial_log.write_bytes(b"")
        cmd = self.command(boot, self.netns and _can_unshare_net())
        (boot.workdir / "bochs-cmdline.txt").write_text(" ".join(cmd) + "\n")
        version = bochs_version()
        print(f"realkvm: Bochs {version or '?'} (cpu {self.spec.cpu}, ips {self.ips}, {boot.cpus} CPU)", file=sys.stderr, flush=True)

        restore = self._own_signal_handlers()
        t0 = time.monotonic()
        timed_out = False
        stdout_path = boot.workdir / "bochs-stdout.txt"
        proc = None
        try:
            with open(stdout_path, "wb") as out:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    cwd=boot.workdir, start_new_session=True, preexec_fn=_die_with_parent,
                )
            timed_out = self._follow(proc, boot, on_output, t0)
        except BootInterrupted as e:
            self._stop(proc)
            restore()
            restore = lambda: None  # noqa: E731
            # The default action of the signal, now that Bochs is gone.
            os.kill(os.getpid(), e.signum)
            raise
        finally:
            self._stop(proc)
            restore()
        seconds = time.monotonic() - t0
        return self._result(proc.returncode, timed_out, seconds, version, boot)

    def _follow(self, proc, boot: Boot, on_output, t0) -> bool:
        """Streams the serial file line by line until Bochs ends; stops Bochs at
        the limit. Returns whether it did."""
        timed_out = False
        pending = b""
        with open(boot.serial_log, "rb") as f:
            while True:
                ended = proc.poll() is not None
                chunk = f.read()
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    if on_output:
                        for ln in lines:
                            on_output(ln.decode("utf-8", "replace") + "\n")
                if ended:
                    if f.read(1):  # written between the poll and the read
                        f.seek(-1, os.SEEK_CUR)
                        continue
                    break
                if not timed_out and time.monotonic() - t0 >= boot.timeout_s:
                    timed_out = True
                    self._stop(proc)
                    continue
                time.sleep(POLL_S)
        if pending and on_output:
            on_output(pending.decode("utf-8", "replace"))
        return timed_out

    def _stop(self, proc):
        """SIGINT first: Bochs' debugger takes it, stops the CPU, reads EOF from
        its stdin (/dev/null) and quits, flushing bochs.log (and printing where
        the CPU was); then SIGTERM, then SIGKILL, `grace_s` apart."""
        if proc is None or proc.poll() is not None:
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(None if sig == signal.SIGKILL else self.grace_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def _own_signal_handlers(self):
        """While Bochs runs, SIGTERM/SIGHUP without a handler of the harness
        (the default action would end Python and leave Bochs running in its own
        session) raise BootInterrupted instead. Returns the undo."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        old = {}
        for s in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(s) is signal.SIG_DFL:
                old[s] = signal.signal(s, _raise_interrupted)

        def restore():
            for s, h in old.items():
                signal.signal(s, h)
            old.clear()

        return restore

    def _result(self, rc, timed_out, seconds, version, boot: Boot) -> BootResult:
        log = boot.workdir / "bochs.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        panics = [m.group(1).strip() for m in re.finditer(r">>PANIC<<\s*(.*)", text)]
        powered_off = any(ACPI_POWER_OFF in p for p in panics)
        notes = [f"bochs_version={version}", f"bochs_cpu={self.spec.cpu}", f"bochs_ips={self.ips}", f"bochs_exit_status={rc}"]
        other = [p for p in panics if ACPI_POWER_OFF not in p]
        if other:
            notes.append(f"bochs_panic={other[0]}")
        where = _stopped_at(boot.workdir / "bochs-stdout.txt")
        if where:
            notes.append(f"bochs_stopped_at={where}")
        if timed_out:
            status = 124
        elif powered_off and rc == 1:
            status = 0  # the guest powered off: Bochs' "fatal" ACPI panic is its clean end
        else:
            status = rc if rc >= 0 else 128 - rc
        notes.append(f"bochs_power_off={'acpi' if powered_off else 'no'}")
        return BootResult(
            exit_status=status, timed_out=timed_out, seconds=seconds,
            emulator_version=f"Bochs {version}" if version else "Bochs", notes=notes,
        )


def _stopped_at(stdout_path: Path) -> str:
    """Where the debugger says the CPU was when Bochs was stopped by SIGINT
    (the last "(0).[ticks] [phys] seg:rip (...): insn" line), or ""."""
    try:
        text = stdout_path.read_text(errors="replace")
    except OSError:
        return ""
    if "Ctrl-C" not in text and "fgets() returned ERROR" not in text:
        return ""
    hits = re.findall(r"^\(\d+\)\.?\[?(\d+)?\]? ?\[(0x[0-9a-f]+)\] ([0-9a-f]{4}:[0-9a-f]+) [^:]*: ?(.*?)\s*(?:;.*)?$", text, re.M)
    if not hits:
        return ""
    ticks, phys, rip, insn = hits[-1]
    return f"{rip} phys {phys}{f' tick {ticks}' if ticks else ''}: {insn.strip()}"


def _host_failure(message):
    """The harness's Fail(EX_HOST, ...) where its errors module is there (it is
    written beside this one), else a RuntimeError."""
    try:
        from ..errors import EX_HOST, Fail  # type: ignore

        return Fail(EX_HOST, message)
    except ImportError:
        return RuntimeError(message)


def _truthy(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(v)


_UNSHARE_OK = None


def _can_unshare_net() -> bool:
    """Whether `unshare --net` works here (root, util-linux); asked once."""
    global _UNSHARE_OK
    if _UNSHARE_OK is None:
        try:
            _UNSHARE_OK = subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0
        except OSError:
            _UNSHARE_OK = False
        if not _UNSHARE_OK:
            print("realkvm: note: unshare --net does not work here; Bochs' RFB display listens on the host's network", file=sys.stderr)
    return _UNSHARE_OK


def _raise_interrupted(signum, _frame):
    raise BootInterrupted(signum)


def _prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None


_PRCTL = _prctl()  # resolved here: the child of fork() must not import anything


def _die_with_parent():
    """In the child, before exec: SIGKILL when the harness's thread that started
    Bochs ends, even by SIGKILL (Linux PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGKILL))


MACHINE_CLASS = BochsMachine
