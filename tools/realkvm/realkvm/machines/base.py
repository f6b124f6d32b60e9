"""The machine interface of the real-KVM harness.

A *machine* is an emulator that gives a Linux kernel real hardware
virtualisation on a host without VMX/SVM: QEMU's TCG with AMD SVM
(`kvm_amd`), Bochs with Intel VMX (`kvm_intel`). Machines are data
(`tools/realkvm/machines.toml`, one table per machine, parsed into a
`MachineSpec`); each emulator is one module of this package
(`realkvm.machines.<emulator>`) that exposes `MACHINE_CLASS`, a subclass of
`Machine`. Everything else of the harness (kernels, the initramfs, the
serial protocol, runs, expectations) is written once for every machine.

A boot is: the kernel image, a gzip'd cpio initramfs whose /init speaks the
serial protocol (markers on the console, see `realkvm.serial`), the kernel
command line the harness wants plus what the machine needs
(`Machine.cmdline()`), a CPU count, memory, a wall-clock limit and a work
directory. The machine's job ends when the emulator has exited (or was
stopped at the limit) and everything the guest wrote to its serial console
is in `Boot.serial_log`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional


@dataclass(frozen=True)
class MachineSpec:
    """One machine of machines.toml."""

    name: str  # e.g. "qemu-svm", "bochs-tigerlake"
    emulator: str  # the module under realkvm.machines: "qemu" or "bochs"
    vendor: str  # "svm" or "vmx"
    kvm_module: str  # the root module loaded in the guest: "kvm_amd" or "kvm_intel"
    cpu: str  # the emulator's CPU model (QEMU -cpu, Bochs cpu: model=)
    description: str = ""
    max_cpus: int = 1  # the most emulated CPUs this machine is known to boot with
    # What the CPU model offers, as documentation (the tool measures it).
    tsc_scaling: Optional[bool] = None
    # The run (tools/realkvm/runs/NAME.toml) the matrix gives this machine's
    # entries unless told otherwise.
    run: str = "kernel-matrix"
    # How many times the matrix's boot and step limits a boot on this machine
    # gets (an emulator slower than QEMU's TCG needs more).
    time_scale: int = 1
    options: dict = field(default_factory=dict)  # emulator-specific settings


@dataclass(frozen=True)
class Boot:
    """What to boot."""

    kernel: Path  # a bzImage
    initrd: Path  # gzip'd cpio newc
    cmdline: str  # the harness's kernel command line, without the machine's part
    cpus: int
    mem_mb: int
    timeout_s: int  # wall-clock limit of the emulator, boot included
    workdir: Path  # the machine's own files (config, ISO, ...)
    serial_log: Path  # where the guest's serial console goes, complete on return


@dataclass
class BootResult:
    """How the emulator ended."""

    exit_status: int  # the emulator's exit status (124 when stopped at the limit)
    timed_out: bool
    seconds: float  # emulator start to exit
    emulator_version: str  # e.g. "QEMU 10.0.2", "Bochs 2.7"
    notes: list = field(default_factory=list)  # what the machine wants said in the run info


class Machine(abc.ABC):
    """An emulator configured as one machine of machines.toml."""

    def __init__(self, spec: MachineSpec):
        self.spec = spec

    #: Seconds the guest's /init waits between its last console line and the
    #: power-off, so that the serial tail reaches the host.
    power_off_delay_s: float = 0.2

    @abc.abstractmethod
    def packages(self) -> list:
        """Debian packages the emulator needs on the host (installed by the
        harness from the machine's own apt sources when missing)."""

    @abc.abstractmethod
    def cmdline(self) -> str:
        """What the kernel command line must hold on this machine (console
        device, clock options), joined to the harness's own."""

    @abc.abstractmethod
    def accepts(self, cpus: int) -> tuple:
        """(True, "") when this machine can boot with `cpus` emulated CPUs,
        else (False, why)."""

    @abc.abstractmethod
    def boot(self, boot: Boot, on_output: Optional[Callable[[str], None]] = None) -> BootResult:
        """Boots, waits for the emulator to end (or stops it at the limit)
        and returns how it ended; `on_output`, when given, is called with
        each console line as it arrives."""
