#!/usr/bin/env python3
"""mttcg-soak-summary.py: one line per soak directory that mttcg-soak.sh filled.

Usage: mttcg-soak-summary.py [--markdown] OUT_DIR [OUT_DIR...]

Reads OUT_DIR/boots.tsv and each boot's out/check.json, and prints: QEMU version,
thread mode, CPUs, boots, how they ended (completed, hangs, panics, other errors),
boots with guest kernel warnings, the median / min / max QEMU seconds of completed
boots, check 5's verdicts, and check 5's lock hand-off numbers (hand-offs per boot,
the shortest hand-off in cycles, the skew it was judged against, the largest
backwards step). With --markdown, a table row per directory instead.

Standard library only.
"""

import csv
import json
import os
import re
import statistics
import sys


def warp_values(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    for c in doc.get("checks") or []:
        if c.get("id") == "warp":
            v = dict(c.get("values") or {})
            v["verdict"] = c.get("verdict")
            return v
    return None


WARNING_RE = re.compile(r"soft lockup|hard LOCKUP|rcu_(?:sched|preempt) (?:self-)?detected stall|\bOops\b|BUG:|Kernel panic"
                        r"|general protection fault|\bint3\b|WARNING: CPU")


def kernel_warnings(boot_dir):
    """Guest kernel warnings on the console (minus the base64 blocks of returned files,
    where "int3" or "Oops" can occur by chance) and in the guest's dmesg."""
    seen = {}
    lines = []
    try:
        skip = False
        with open(os.path.join(boot_dir, "serial.log"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("@@TSC-QEMU-FILE ") and not line.startswith("@@TSC-QEMU-FILES-DONE"):
                    skip = True
                if not skip:
                    lines.append(line)
                if line.startswith("@@TSC-QEMU-FILE-END@@"):
                    skip = False
    except OSError:
        pass
    try:
        with open(os.path.join(boot_dir, "out", "dmesg.txt"), encoding="utf-8", errors="replace") as f:
            lines.extend(f)
    except OSError:
        pass
    for line in lines:
        for m in WARNING_RE.findall(line):
            seen[m] = seen.get(m, 0) + 1
    return "; ".join(f"{k} x{v}" for k, v in sorted(seen.items()))


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.1f}"
    return f"{x:,}"


def summarise(d):
    with open(os.path.join(d, "boots.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    info = {}
    for r in rows:
        p = os.path.join(d, f"boot-{r['boot']}", "run-info.txt")
        try:
            with open(p, encoding="utf-8") as f:
                for line in f:
                    k, _, v = line.strip().partition("=")
                    info.setdefault(k, v)
        except OSError:
            pass
    outcomes = {}
    for r in rows:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    secs = [float(r["qemu_seconds"]) for r in rows if r["outcome"] == "completed" and r["qemu_seconds"] not in ("", "-")]
    warned = []
    for r in rows:
        w = kernel_warnings(os.path.join(d, f"boot-{r['boot']}"))
        if w:
            warned.append(f"{r['boot']} ({r['outcome']}): {w}")
    warps = [w for w in (warp_values(os.path.join(d, f"boot-{r['boot']}", "out", "check.json")) for r in rows) if w]
    verdicts = {}
    for w in warps:
        verdicts[w["verdict"]] = verdicts.get(w["verdict"], 0) + 1
    handoffs = [w.get("handoffs") for w in warps if isinstance(w.get("handoffs"), int)]
    shortest = [w.get("shortest_handoff_cycles") for w in warps if isinstance(w.get("shortest_handoff_cycles"), int)]
    skews = [w.get("skew_cycles") for w in warps if isinstance(w.get("skew_cycles"), int)]
    maxwarp = [w.get("max_warp_cycles") for w in warps if isinstance(w.get("max_warp_cycles"), int)]
    # Where the guest saw a backwards step: how far short of the exact skew the largest
    # one fell (the shortest one-way transfer from the vCPU ahead to the one behind).
    gaps = [w["skew_cycles"] - w["max_warp_cycles"] for w in warps
            if isinstance(w.get("skew_cycles"), int) and isinstance(w.get("max_warp_cycles"), int) and w.get("warps")]
    return {
        "dir": d,
        "qemu": info.get("qemu_version", "?"),
        "thread": info.get("tcg_thread", "?"),
        "smp": info.get("smp", "?"),
        "kernel": info.get("kernel_release", "?"),
        "boots": len(rows),
        "completed": outcomes.get("completed", 0),
        "hangs": outcomes.get("hang", 0),
        "panics": outcomes.get("panic", 0),
        "errors": outcomes.get("error", 0),
        "warned": warned,
        "median_s": statistics.median(secs) if secs else None,
        "min_s": min(secs) if secs else None,
        "max_s": max(secs) if secs else None,
        "verdicts": ", ".join(f"{k} x{v}" for k, v in sorted(verdicts.items())) or "-",
        "handoffs_median": statistics.median(handoffs) if handoffs else None,
        "handoffs_range": f"{min(handoffs)}-{max(handoffs)}" if handoffs else "-",
        "shortest_min": min(shortest) if shortest else None,
        "shortest_median": statistics.median(shortest) if shortest else None,
        "skew_median": statistics.median(skews) if skews else None,
        "max_warp": max(maxwarp) if maxwarp else None,
        "warp_boots": len(gaps),
        "gap_min": min(gaps) if gaps else None,
        "gap_median": statistics.median(gaps) if gaps else None,
        "gap_max": max(gaps) if gaps else None,
    }


def main(argv):
    md = "--markdown" in argv
    dirs = [a for a in argv[1:] if a != "--markdown"]
    if not dirs:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows = [summarise(d) for d in dirs]
    if md:
        print("| QEMU | thread | smp | kernel | boots | hangs | panics | other errors | boots with kernel warnings | median boot s (min-max) "
              "| check 5 verdicts | hand-offs per boot (median, range) | shortest hand-off cycles (min / median) | skew cycles (median) "
              "| boots with a backwards step: skew minus largest step, cycles (min / median / max) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in rows:
        if md:
            print(f"| {s['qemu']} | {s['thread']} | {s['smp']} | {s['kernel']} | {s['boots']} | {s['hangs']} | {s['panics']} | {s['errors']} "
                  f"| {len(s['warned'])} | {fmt(s['median_s'])} ({fmt(s['min_s'])}-{fmt(s['max_s'])}) | {s['verdicts']} "
                  f"| {fmt(s['handoffs_median'])} ({s['handoffs_range']}) | {fmt(s['shortest_min'])} / {fmt(s['shortest_median'])} "
                  f"| {fmt(s['skew_median'])} | {s['warp_boots']}: {fmt(s['gap_min'])} / {fmt(s['gap_median'])} / {fmt(s['gap_max'])} |")
        else:
            print(f"QEMU {s['qemu']} thread={s['thread']} smp={s['smp']} kernel {s['kernel']}: {s['boots']} boots, "
                  f"{s['completed']} completed, {s['hangs']} hangs, {s['panics']} panics, {s['errors']} other errors, "
                  f"{len(s['warned'])} with guest kernel warnings; median boot {fmt(s['median_s'])} s "
                  f"({fmt(s['min_s'])}-{fmt(s['max_s'])}); check 5: {s['verdicts']}; hand-offs per boot median "
                  f"{fmt(s['handoffs_median'])} ({s['handoffs_range']}); shortest hand-off min {fmt(s['shortest_min'])} "
                  f"median {fmt(s['shortest_median'])} cycles; skew median {fmt(s['skew_median'])} cycles; "
                  f"largest backwards step {fmt(s['max_warp'])}; in the {s['warp_boots']} boots with a backwards step, "
                  f"skew minus the largest step min {fmt(s['gap_min'])} median {fmt(s['gap_median'])} max {fmt(s['gap_max'])} cycles")
            for w in s["warned"]:
                print(f"  guest kernel warnings in boot {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
