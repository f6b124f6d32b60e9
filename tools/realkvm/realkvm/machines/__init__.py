"""Machines of the real-KVM harness: one module per emulator (see base.py).

`specs()` reads tools/realkvm/machines.toml; `load(name)` gives the Machine
for a machine's name by importing `realkvm.machines.<emulator>` and
instantiating its `MACHINE_CLASS` with the spec. Nothing outside the
emulator's module knows which emulator it is.

Optional hook beyond base.Machine: `prepare_host(host)`, called with a
`realkvm.host.Host` instead of the plain install of `packages()` that the
harness does otherwise, for machines that need more (QEMU: a newer QEMU
from backports where the host release's own is too old).
"""

import dataclasses
import importlib
import tomllib
from pathlib import Path

from ..errors import EX_USAGE, Fail
from .base import MachineSpec

MACHINES_TOML = Path(__file__).resolve().parents[2] / "machines.toml"
DEFAULT = "qemu-svm"
FIELDS = {f.name for f in dataclasses.fields(MachineSpec)}
REQUIRED = {"emulator", "vendor", "kvm_module", "cpu"}


def specs(path=MACHINES_TOML):
    """{name: MachineSpec} of machines.toml, in its order."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    out = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise ValueError(f"{path}: {name} is not a table")
        unknown = set(table) - FIELDS
        missing = REQUIRED - set(table)
        if unknown or missing:
            raise ValueError(f"{path}: machine {name}: unknown fields {sorted(unknown)}, missing {sorted(missing)}")
        out[name] = MachineSpec(name=name, **table)
    return out


def spec(name, path=MACHINES_TOML):
    all_specs = specs(path)
    if name not in all_specs:
        raise Fail(EX_USAGE, f"no machine '{name}' in {path.name} (machines: {', '.join(all_specs)})")
    return all_specs[name]


def machine_class(s):
    module = f"{__name__}.{s.emulator}"
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise Fail(
            EX_USAGE,
            f"machine {s.name} needs realkvm/machines/{s.emulator}.py, which this checkout does not have",
        ) from None
    cls = getattr(mod, "MACHINE_CLASS", None)
    if cls is None:
        raise Fail(EX_USAGE, f"realkvm/machines/{s.emulator}.py has no MACHINE_CLASS")
    return cls


def load(name, cpu=None, options=None, path=MACHINES_TOML):
    """The Machine called `name`, with its CPU model and options overridden
    where given (options must be ones machines.toml gives the machine)."""
    s = spec(name, path)
    if options:
        unknown = [k for k in options if k not in s.options]
        if unknown:
            raise Fail(EX_USAGE, f"machine {name} has no option {', '.join(unknown)} (its options: {', '.join(s.options) or 'none'})")
        s = dataclasses.replace(s, options={**s.options, **options})
    if cpu:
        s = dataclasses.replace(s, cpu=cpu)
    return machine_class(s)(s)
