"""Kernel variants as data: tools/realkvm/variants/NAME.patch (the format:
variants/README.md).

A variant is a header of `Key: value` lines, a line `---`, and a unified diff
against the kernel tree. `load(dir)` reads every variant of a directory and
checks it: the name equals the file's, the kind and machines are known, the
base exists and the bases form no cycle, every `Expect` word is `N=VERDICT`
(or `N=A|B`) for a check number of the tool. `Variants.stack(name)` gives the
patches to apply, base first; `Variants.expected(name)` the verdicts each
check must give, the variant's own words over its base's, down to `stock`.
Standard library only.
"""

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

VARIANTS_DIR = Path(__file__).resolve().parents[1] / "variants"
KINDS = ("base", "fix", "mutant")
MACHINES = ("svm", "vmx")
VERDICTS = ("PASS", "FAIL", "UNDECIDED", "SKIP")
STOCK = "stock"
# The check numbers a variant may declare (check's thirteen).
CHECKS = range(1, 14)
REQUIRED = ("Variant", "Kind", "Base", "Models", "Changes", "Machines", "Expect")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class VariantError(Exception):
    pass


@dataclass
class Variant:
    name: str
    kind: str
    base: str
    models: str
    changes: str
    machines: tuple
    expect: dict  # {check number: frozenset of verdicts}
    diff: str
    path: Path
    header: dict = field(default_factory=dict)

    def files(self):
        """The tree paths the diff changes (its +++ lines, b/ stripped)."""
        out = []
        for line in self.diff.splitlines():
            if line.startswith("+++ "):
                p = line[4:].split("\t")[0].strip()
                out.append(p[2:] if p.startswith("b/") else p)
        return out


def parse(text, path):
    """One variant file's Variant, or VariantError naming the file and what is wrong."""
    where = Path(path).name
    lines = text.splitlines(keepends=True)
    header, key, n = {}, None, 0
    for n, line in enumerate(lines, 1):
        if line.rstrip("\n") == "---":
            break
        if not line.strip() or line.startswith("#"):
            key = None
            continue
        if line[0] in " \t" and key:
            header[key] += " " + line.strip()
            continue
        m = re.match(r"^([A-Z][A-Za-z-]*):\s*(.*)$", line.rstrip("\n"))
        if not m:
            raise VariantError(f"{where}:{n}: not a 'Key: value' header line: {line.strip()!r}")
        key = m.group(1)
        if key in header:
            raise VariantError(f"{where}:{n}: {key} given twice")
        header[key] = m.group(2).strip()
    else:
        raise VariantError(f"{where}: no '---' line between the header and the diff")
    diff = "".join(lines[n:])
    missing = [k for k in REQUIRED if not header.get(k)]
    if missing:
        raise VariantError(f"{where}: header lacks {', '.join(missing)} (see variants/README.md)")
    unknown = sorted(set(header) - set(REQUIRED))
    if unknown:
        raise VariantError(f"{where}: unknown header keys {', '.join(unknown)} (known: {', '.join(REQUIRED)})")
    name = header["Variant"]
    if name != Path(path).stem or not NAME_RE.match(name):
        raise VariantError(f"{where}: Variant '{name}' must be the file's name without .patch (lower case, digits, -)")
    kind = header["Kind"]
    if kind not in KINDS:
        raise VariantError(f"{where}: Kind '{kind}' is not one of {', '.join(KINDS)}")
    machines = tuple(header["Machines"].split())
    if not machines or any(m not in MACHINES for m in machines):
        raise VariantError(f"{where}: Machines '{header['Machines']}' must name svm, vmx or both")
    expect = parse_expect(header["Expect"], where)
    has_diff = any(line.startswith("+++ ") for line in diff.splitlines())
    if kind == "base":
        if name != STOCK or header["Base"] != STOCK or has_diff:
            raise VariantError(f"{where}: the one base is '{STOCK}': Base {STOCK}, an empty diff")
    elif not has_diff:
        raise VariantError(f"{where}: a {kind} needs a diff after '---'")
    return Variant(name, kind, header["Base"], header["Models"], header["Changes"], machines, expect, diff, Path(path), header)


def parse_expect(text, where):
    out = {}
    for word in text.split():
        m = re.match(r"^(\d+)=([A-Z|]+)$", word)
        if not m:
            raise VariantError(f"{where}: Expect word '{word}' is not N=VERDICT (e.g. 8=PASS, 9=FAIL|PASS)")
        number = int(m.group(1))
        verdicts = frozenset(m.group(2).split("|"))
        if number not in CHECKS:
            raise VariantError(f"{where}: Expect names check {number}; the checks are {CHECKS.start}-{CHECKS.stop - 1}")
        if not verdicts or not verdicts <= set(VERDICTS):
            raise VariantError(f"{where}: Expect {word}: verdicts are {', '.join(VERDICTS)}")
        if number in out:
            raise VariantError(f"{where}: Expect names check {number} twice")
        out[number] = verdicts
    return out


class Variants:
    def __init__(self, by_name):
        self.by_name = by_name
        for v in by_name.values():
            self.stack(v.name)  # a missing base or a cycle is an error now, not at build time

    def __iter__(self):
        return iter(self.by_name.values())

    def __getitem__(self, name):
        return self.by_name[name]

    def names(self):
        return list(self.by_name)

    def in_order(self):
        """Every variant, each after its base: stock, the fixes, then the rest, by name."""
        return sorted(self.by_name.values(), key=lambda v: (len(self.stack(v.name)), v.kind != "fix", v.name))

    def stack(self, name):
        """[Variant], the base first, `name` last; `stock` (no diff) left out."""
        out, seen = [], []
        while name != STOCK:
            if name in seen:
                raise VariantError(f"variants {' -> '.join(seen + [name])}: the bases form a cycle")
            seen.append(name)
            v = self.by_name.get(name)
            if v is None:
                raise VariantError(f"variant {seen[0]}: its base '{name}' is no variant here")
            out.insert(0, v)
            name = v.base
        return out

    def expected(self, name):
        """{check number: frozenset of verdicts}: what `stock` declares, overridden
        by each variant of the stack in turn."""
        if STOCK not in self.by_name:
            raise VariantError(f"no {STOCK}.patch: the stock kernel's verdicts are what every variant builds on")
        out = dict(self.by_name[STOCK].expect)
        for v in self.stack(name):
            out.update(v.expect)
        return out

    def key(self, name):
        """A digest of the patches `name` applies, base first (its modules' cache key)."""
        h = hashlib.sha256()
        for v in self.stack(name):
            h.update(v.name.encode() + b"\0" + v.diff.encode() + b"\0")
        return h.hexdigest()[:16]


def load(directory=VARIANTS_DIR, only=None):
    """Variants of `directory`; with `only` (names), those and their bases."""
    by_name = {}
    for p in sorted(Path(directory).glob("*.patch")):
        v = parse(p.read_text(encoding="utf-8"), p)
        by_name[v.name] = v
    if STOCK not in by_name:
        raise VariantError(f"{directory}: no {STOCK}.patch")
    every = Variants(by_name)
    if not only:
        return every
    unknown = [n for n in only if n not in by_name]
    if unknown:
        raise VariantError(f"no variant {', '.join(unknown)} in {directory} (variants: {', '.join(by_name)})")
    keep = {STOCK}
    for n in only:
        keep.update(v.name for v in every.stack(n))
    return Variants({n: v for n, v in by_name.items() if n in keep})
