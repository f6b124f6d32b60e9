"""The variants' judge: every check's verdict on every kernel variant against
what the variant declares (tools/realkvm/variants/*.patch), and against the
verdict its raw numbers give (realkvm/rederive.py).

Usage: realkvm variant-judge ARTEFACTS MACHINE... [--dir DIR] [--variant NAME]...

ARTEFACTS/MACHINE/VARIANT/ holds one variant's files from `realkvm variants`
(check.json, restore.json, dmesg.txt, modules.log; wedged.txt or not-run.txt
when it did not run). A check the variant's Expect (or a base's, down to
stock) names must give one of the declared verdicts; the TSC-frequency checks
(10-13) none names are held to the kernel matrix's rules for them on that
machine (realkvm/frequency_expectations.py: taken or refused as KVM documents,
each verdict the one its own evidence gives); any other check none names must
give what it gave on the variant's base in the same boot. A mutant is killed
by the checks that FAIL on it and did not FAIL on its base; the summary says
which checks killed which mutants, names every mutant no check killed (a gap
in the tool) and every check that killed none. Writes ARTEFACTS/summary.json
and ARTEFACTS/mutants.md (the table for docs/mutants.md). Exit 0 only when
every verdict held.
"""

import json
import re
import sys
from pathlib import Path

from . import frequency_expectations as freq
from . import machines as mach
from . import rederive
from . import variants as vdata
from .expectations import Kernel, read_json, read_kv, read_text

SHORT = {"PASS": "PASS", "FAIL": "FAIL", "SKIP": "SKIP", "UNDECIDED": "UNDEC"}
# Kernel log lines that say KVM or the kernel broke while a variant ran.
KERNEL_TROUBLE = re.compile(r"\b(Oops|BUG:|WARNING:|general protection fault|Call Trace)")
# The checks every mutant kind is meant to be killed by (check 6 judges a limit, not KVM).
KILLING_CHECKS = (1, 2, 3, 4, 5, 7, 8, 9)


def decider(check):
    """The number that decided a verdict: the reason's first clause, shortened."""
    reason = " ".join(str(check.get("reason", "")).split())
    first = re.split(r"; |: (?=[a-z])", reason, maxsplit=1)[0]
    return first if len(first) <= 140 else first[:137] + "..."


class Result:
    def __init__(self, machine, variant):
        self.machine, self.variant = machine, variant
        self.verdicts = {}  # number -> verdict
        self.checks = {}  # number -> the check's JSON
        self.failures = []
        self.notes = []
        self.ran = False
        self.restore = None

    def fail(self, what, why):
        self.failures.append(f"FAIL [{self.machine} {self.variant}] {what}: {why}")


def judge_variant(root, machine, v, variants, results):
    r = Result(machine, v.name)
    d = Path(root) / machine / v.name
    for marker in ("wedged.txt", "not-run.txt"):
        text = read_text(d / marker)
        if text is not None:
            r.fail("run", f"did not run to the end: {text.strip()}")
            return r
    doc, why = read_json(d / "check.json")
    if doc is None:
        log = (read_text(d / "modules.log") or "").strip()
        r.fail("check", f"{why}; stderr: {(read_text(d / 'check.stderr') or '').strip()[:300]}"
               + (f"; modules: {log[:300]}" if log else ""))
        return r
    r.ran = True
    for c in doc.get("checks") or []:
        n = c.get("number")
        r.verdicts[n], r.checks[n] = c.get("verdict"), c
    declared = variants.expected(v.name)
    base = results.get((machine, v.base)) if v.name != vdata.STOCK else None
    family = frequency_rules(root, machine, v, doc, declared)
    r.failures += family.failures
    for n in sorted(r.verdicts):
        verdict, c = r.verdicts[n], r.checks[n]
        name = f"check {n} {c.get('id')}"
        if n in declared:
            if verdict not in declared[n]:
                r.fail(name, f"{verdict}, declared {'|'.join(sorted(declared[n]))}: {c.get('reason', '')[:400]}")
        elif n in FAMILY:
            pass  # judged by the frequency family's rules above
        elif base is not None and base.ran:
            if verdict != base.verdicts.get(n):
                r.fail(name, f"{verdict}, but {base.verdicts.get(n)} on its base {v.base} and not declared: {c.get('reason', '')[:300]}")
        allowed = rederive.allowed(n, c.get("values"))
        if allowed is not None and verdict not in allowed:
            r.fail(name, f"{verdict}, but its numbers allow only {'|'.join(sorted(allowed))}: {c.get('reason', '')[:300]}")
    trouble = [ln for ln in (read_text(d / "dmesg.txt") or "").splitlines() if KERNEL_TROUBLE.search(ln)]
    if trouble:
        (r.fail if v.kind != "mutant" else lambda w, t: r.notes.append(f"{w}: {t}"))(
            "kernel log", f"{len(trouble)} line(s) of trouble, e.g. {trouble[0].strip()[:200]}")
    rdoc, _ = read_json(d / "restore.json")
    if rdoc is not None:
        r.restore = restore_summary(rdoc)
    return r


FAMILY = range(10, 14)


def frequency_rules(root, machine, v, doc, declared):
    """A stand-in kernel judged by the kernel matrix's rules for checks 10-13 that
    the variant's declarations leave open; its failures name the variant."""
    info = read_kv(Path(root) / machine / "machine.txt") or {}
    k = Kernel(str(Path(root) / machine), f"{machine} {v.name}", machine=mach.spec(info.get("machine", machine)))
    k.release = info.get("release", "?")
    k.vcpus = (doc.get("options") or {}).get("vcpus")
    open_ids = [cid for n, cid in enumerate(freq.FREQUENCY_IDS, FAMILY.start) if n not in declared]
    by_id = {c.get("id"): c for c in doc.get("checks") or []}
    if open_ids:
        freq.judge_family(k, by_id, doc.get("environment") or {}, only=open_ids)
    return k


def restore_summary(doc):
    """The documented method's outcome, in a few words."""
    for m in doc.get("methods") or []:
        if m.get("method") == "documented":
            if not m.get("completed"):
                return f"documented failed at {m.get('failed_step') or '?'}: {str(m.get('error') or m.get('not_run_reason'))[:120]}"
            words = ((m.get("keeps") or {}).get("after_one") or {}).get("keeps")
            return f"documented: skew {m.get('skew_before_cycles')} -> {m.get('skew_after_cycles')}, keeps {words}"
    return "no documented method"


def kills(results, variants, machine):
    """{mutant: [check numbers that FAIL on it and not on its base]}."""
    out = {}
    for v in variants:
        if v.kind != "mutant":
            continue
        r, b = results.get((machine, v.name)), results.get((machine, v.base))
        if r is None or b is None or not r.ran or not b.ran:
            continue
        out[v.name] = [n for n in sorted(r.verdicts) if r.verdicts[n] == "FAIL" and b.verdicts.get(n) != "FAIL"]
    return out


def markdown(results, variants, machines, release):
    lines = []
    for m in machines:
        rows = [(v, results.get((m, v.name))) for v in variants if (m, v.name) in results]
        if not rows:
            continue
        k = kills(results, variants, m)
        lines += [f"### {m}, Linux {release.get(m, '?')}", "",
                  "| variant | kind | " + " | ".join(str(n) for n in range(1, 14)) + " | killed by | judged |",
                  "|---|---|" + "---|" * 13 + "---|---|"]
        for v, r in rows:
            base = results.get((m, v.base))
            cells = []
            for n in range(1, 14):
                verdict = r.verdicts.get(n) if r.ran else None
                cell = SHORT.get(verdict, verdict or "-")
                if r.ran and base is not None and base.ran and v.name != vdata.STOCK and verdict != base.verdicts.get(n):
                    cell = f"**{cell}**"
                cells.append(cell)
            killed = ", ".join(str(n) for n in k.get(v.name, [])) if v.kind == "mutant" else ""
            if v.kind == "mutant" and r.ran and not k.get(v.name):
                killed = "none: a gap"
            if not r.ran:
                killed = "did not run: " + (r.failures[0].split("did not run to the end: ", 1)[-1][:80] if r.failures else "?")
            lines.append(f"| `{v.name}` | {v.kind} | " + " | ".join(cells) + f" | {killed} | {'ok' if not r.failures else 'MISMATCH'} |")
        lines += ["", f"What decided each verdict that differs from its base's on {m} (the check's reason, first clause):", "",
                  "| variant | check | verdict | on its base | what decided it |", "|---|---|---|---|---|"]
        for v, r in rows:
            base = results.get((m, v.base))
            if not r.ran or base is None or not base.ran or v.name == vdata.STOCK:
                continue
            for n in sorted(r.verdicts):
                if r.verdicts[n] != base.verdicts.get(n):
                    why = decider(r.checks[n]).replace("|", "\\|")
                    lines.append(f"| `{v.name}` | {n} | {r.verdicts[n]} | {base.verdicts.get(n)} | {why} |")
        lines.append("")
    return "\n".join(lines)


def main(argv):
    args, vdir, only = [], vdata.VARIANTS_DIR, []
    it = iter(argv)
    for a in it:
        if a == "--dir":
            vdir = Path(next(it, ""))
        elif a == "--variant":
            only.append(next(it, ""))
        else:
            args.append(a)
    if len(args) < 2:
        sys.stderr.write(__doc__)
        return 2
    root, machines = Path(args[0]), args[1:]
    variants = vdata.load(vdir, only or None)
    results, release = {}, {}
    for m in machines:
        info = read_kv(root / m / "machine.txt") or {}
        release[m] = info.get("release", "?")
        vendor = info.get("vendor")
        # Bases first: a variant is compared with its base's measured verdicts.
        for v in variants.in_order():
            if vendor and vendor not in v.machines:
                continue
            results[(m, v.name)] = judge_variant(root, m, v, variants, results)
    failures = [f for r in results.values() for f in r.failures]
    for r in results.values():
        for n in r.notes:
            print(f"note [{r.machine} {r.variant}] {n}")
    for f in failures:
        print(f)
    table = markdown(results, variants.in_order(), machines, release)
    print(table)
    gaps, coverage = [], {n: [] for n in KILLING_CHECKS}
    for m in machines:
        for mutant, by in kills(results, variants, m).items():
            if not by:
                gaps.append(f"{mutant} ({m})")
            for n in by:
                if n in coverage:
                    coverage[n].append(f"{mutant} ({m})")
    idle = [n for n, ms in coverage.items() if not ms]
    print(f"mutants no check killed (gaps in the tool): {', '.join(gaps) or 'none'}")
    print(f"checks that killed no mutant: {', '.join(map(str, idle)) or 'none'}")
    (root / "mutants.md").write_text(table + "\n")
    summary = {
        "machines": machines, "release": release, "failures": failures, "gaps": gaps, "idle_checks": idle,
        "variants": {f"{m}/{n}": {"verdicts": r.verdicts, "ran": r.ran, "restore": r.restore, "failures": r.failures}
                     for (m, n), r in results.items()},
        "kills": {m: kills(results, variants, m) for m in machines},
    }
    (root / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    ok = not failures
    print(f"variants: {'every verdict as declared' if ok else f'{len(failures)} verdict(s) not as declared'}"
          f" on {' '.join(machines)}")
    return 0 if ok else 1
