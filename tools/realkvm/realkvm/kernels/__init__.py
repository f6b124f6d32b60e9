"""Kernels of the real-KVM harness: what to boot and the modules to load.

A kernel kind is a class with `describe()` and `resolve(root_module)`,
which returns a `Resolved`: the bzImage, the release the host means to
boot, and the load order of the machine's root module (`kvm_amd`,
`kvm_intel`) and its dependencies. Kinds:

- `debian.DebianKernel`: the newest kernel of a Debian suite and flavour,
  downloaded once into a cache (realkvm/kernels/debian.py);
- `tree.BuiltKernel`: a bzImage and the modules of a build tree
  (realkvm/kernels/tree.py).

A variant of a built tree (the tree plus a patch, only the KVM modules
rebuilt) is one more kind: it rebuilds the modules into a directory of its
own and resolves like a BuiltKernel on it, with the base tree's bzImage.
"""

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Resolved:
    image: Path  # a bzImage
    release: str  # what the host means to boot ("unknown" when it cannot tell)
    desc: str  # for messages: "kernel 6.1.0-57-amd64 (Debian bookworm, amd64)"
    modules: list = field(default_factory=list)  # [(file base name, ELF bytes)], load order
