"""A small command-line parser with the bash scripts' behaviour and messages.

`argparse` words its errors its own way and exits 2 for all of them; the
harness's commands keep the phrases and exit codes their users (and tests)
rely on: "--X needs a value", "unknown option '--X' (see --help)", values as
`--X V` or `--X=V`, `--` ending the options, and for `boot` the first
non-option word starting the program and its arguments.
"""

from dataclasses import dataclass

from .errors import Fail


@dataclass(frozen=True)
class Opt:
    key: str  # where the value goes
    names: tuple  # e.g. ("--flavour", "--flavor")
    value: bool = True  # takes a value (else a flag)
    repeat: bool = False  # repeatable: the values form a list


def parse(argv, opts, code, positional="stop", unknown="unknown option '{}' (see --help)"):
    """Returns (values, rest). `positional`: "stop" (the first non-option and
    everything after it is `rest`) or "error" (a non-option is an unknown
    argument). Values of options not given are absent; flags are True."""
    by_name = {n: o for o in opts for n in o.names}
    values = {}
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest = argv[i + 1 :]
            break
        name, eq, inline = a.partition("=") if a.startswith("--") else (a, "", "")
        o = by_name.get(name)
        if o is None:
            if a.startswith("-") and a != "-":
                raise Fail(code, unknown.format(a))
            if positional == "stop":
                rest = argv[i:]
                break
            raise Fail(code, unknown.format(a))
        if not o.value:
            if eq:
                raise Fail(code, f"{name} takes no value")
            values[o.key] = True
            i += 1
            continue
        if eq:
            v = inline
            i += 1
        else:
            if i + 1 >= len(argv):
                raise Fail(code, f"{a} needs a value" + ("" if positional == "stop" else " (see --help)"))
            v = argv[i + 1]
            i += 2
        if o.repeat:
            values.setdefault(o.key, []).append(v)
        else:
            values[o.key] = v
    return values, rest


def positive_int(s):
    """int(s) when s is a decimal integer > 0, else None."""
    return int(s) if isinstance(s, str) and s.isdigit() and s.isascii() and int(s) > 0 else None
