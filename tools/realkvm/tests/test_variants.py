"""Kernel variants as data: the patch files parse and stack, their declared
verdicts inherit down to stock, the repository's own variants are valid, a
variant's modules are built with its patches in and the tree clean after,
the runner swaps modules per group, and the judge holds every verdict to
its declaration, its base and its numbers."""

import json
import sys
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401
from realkvm import variant_judge
from realkvm import variants as vdata
from realkvm.errors import Fail
from realkvm.runs import RUNNER, Run

STOCK = """Variant: stock
Kind: base
Base: stock
Models: the kernel as it is
Changes: nothing
Machines: svm vmx
Expect: 1=PASS 2=PASS 8=FAIL 9=FAIL|PASS 10=FAIL|PASS 11=PASS|UNDECIDED 12=PASS 13=SKIP
---
"""

DIFF = """--- a/f.c
+++ b/f.c
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""


def variant(name, kind="mutant", base="stock", expect="8=PASS", machines="svm vmx", diff=DIFF, extra=""):
    return (f"Variant: {name}\nKind: {kind}\nBase: {base}\nModels: none: a test\nChanges: a change\n"
            f"  over two lines\nMachines: {machines}\nExpect: {expect}\n{extra}---\n{diff}")


def write_dir(files):
    d = Path(tempfile.mkdtemp(prefix="realkvm-variants."))
    for name, text in files.items():
        (d / f"{name}.patch").write_text(text)
    return d


class Parse(unittest.TestCase):
    def setUp(self):
        self.dirs = []

    def tearDown(self):
        for d in self.dirs:
            shutil.rmtree(d, True)

    def load(self, files, only=None):
        d = write_dir(files)
        self.dirs.append(d)
        return vdata.load(d, only)

    def test_a_stack_inherits_the_verdicts_of_its_bases(self):
        v = self.load({"stock": STOCK, "fix": variant("fix", "fix", expect="8=PASS 9=PASS"),
                       "m": variant("m", base="fix", expect="5=FAIL 9=FAIL|UNDECIDED")})
        self.assertEqual([x.name for x in v.stack("m")], ["fix", "m"])
        self.assertEqual(v.stack("stock"), [])
        want = {1: {"PASS"}, 2: {"PASS"}, 5: {"FAIL"}, 8: {"PASS"}, 9: {"FAIL", "UNDECIDED"},
                10: {"FAIL", "PASS"}, 11: {"PASS", "UNDECIDED"}, 12: {"PASS"}, 13: {"SKIP"}}
        self.assertEqual({k: set(s) for k, s in v.expected("m").items()}, want)
        self.assertEqual(v["m"].changes, "a change over two lines")
        self.assertEqual(v["m"].files(), ["f.c"])
        self.assertNotEqual(v.key("m"), v.key("fix"))
        only = self.load({"stock": STOCK, "fix": variant("fix", "fix"), "m": variant("m", base="fix"),
                          "other": variant("other")}, only=["m"])
        self.assertEqual(sorted(only.names()), ["fix", "m", "stock"])

    def test_bad_files_are_refused_naming_the_file_and_the_fault(self):
        cases = {
            "no separator": ({"x": "Variant: x\n"}, "no '---'"),
            "name differs": ({"x": variant("y")}, "must be the file's name"),
            "bad kind": ({"x": variant("x", kind="tweak")}, "Kind 'tweak'"),
            "bad machine": ({"x": variant("x", machines="arm")}, "Machines"),
            "bad expect": ({"x": variant("x", expect="8:PASS")}, "not N=VERDICT"),
            "bad verdict": ({"x": variant("x", expect="8=MAYBE")}, "verdicts are"),
            "check 14": ({"x": variant("x", expect="14=PASS")}, "the checks are 1-13"),
            "twice": ({"x": variant("x", expect="8=PASS 8=FAIL")}, "twice"),
            "no diff": ({"x": variant("x", diff="")}, "needs a diff"),
            "unknown key": ({"x": variant("x", extra="Colour: red\n")}, "unknown header keys Colour"),
            "missing base": ({"x": variant("x", base="nowhere")}, "its base 'nowhere'"),
            "cycle": ({"a": variant("a", base="b"), "b": variant("b", base="a")}, "cycle"),
            "no stock": (None, "no stock.patch"),
        }
        for what, (files, text) in cases.items():
            with self.subTest(what):
                with self.assertRaises(vdata.VariantError) as e:
                    self.load({"stock": STOCK, **files} if files is not None else {"x": variant("x")})
                self.assertIn(text, str(e.exception))
        with self.assertRaises(vdata.VariantError) as e:
            self.load({"stock": STOCK}, only=["absent"])
        self.assertIn("no variant absent", str(e.exception))

    def test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix(self):
        v = vdata.load()
        names = v.names()
        self.assertIn("stock", names)
        fixes = [x for x in v if x.kind == "fix"]
        self.assertTrue(fixes, "a fix variant")
        for x in v:
            self.assertTrue(x.changes and x.models, x.name)
            if x.kind == "mutant":
                self.assertIn(v.stack(x.name)[0].kind, ("fix",), f"{x.name} builds on a fix")
                self.assertTrue(x.expect, f"{x.name} declares the verdicts it flips")
        # Every check the tool is meant to prove on KVM has a mutant declared to FAIL it.
        declared_fails = {n for x in v if x.kind == "mutant" for n, s in x.expect.items() if "FAIL" in s}
        for n in variant_judge.KILLING_CHECKS:
            self.assertIn(n, declared_fails, f"no mutant declares check {n} FAIL")


    def test_the_patch_in_docs_is_the_fix_variants_diff(self):
        """docs/kvmclock-fix.patch (for a kernel developer to send) carries the very diff the
        variants' fix builds and the matrix proves."""
        fix = vdata.load(only=["fix-tsc-write-clock-update"])["fix-tsc-write-clock-update"]
        doc = (support.REPO / "docs" / "kvmclock-fix.patch").read_text()
        self.assertIn("Fixes: 0c899c25d754", doc)
        self.assertEqual(doc[doc.index("diff --git "):], fix.diff[fix.diff.index("diff --git "):])


class RunnerGroups(unittest.TestCase):
    def test_each_group_swaps_its_modules_and_a_failed_swap_blocks_its_steps(self):
        d = Path(tempfile.mkdtemp(prefix="realkvm-groups."))
        self.addCleanup(shutil.rmtree, d, True)
        fake = d / "bin"
        fake.mkdir()
        # Stand-ins for the guest's tools: insmod fails for a file named bad.ko.
        (fake / "insmod").write_text('#!/bin/sh\ncase "$1" in *bad.ko) echo "insmod: bad" >&2; exit 1;; esac\n'
                                     'echo "$1" >>"$LOG"\n')
        (fake / "rmmod").write_text('#!/bin/sh\necho "rmmod $1" >>"$LOG"\n')
        (fake / "dmesg").write_text('#!/bin/sh\nprintf "[1] early\\n[2] realkvm-group-begin a\\n[3] in a\\n"\n')
        for f in fake.iterdir():
            f.chmod(0o755)
        toml = '''
name = "t"
[[group]]
foreach = "variants"
name = "{variant}"
modules = { unload = ["kvm_amd", "kvm"], load = ["{dir}/{variant}/kvm.ko", "{dir}/{variant}/{ko}"] }
[[group.step]]
name = "{variant}_check"
argv = ["sh", "-c", "echo ran {variant}"]
stdout = "{variant}/check.out"
'''
        (d / "run.toml").write_text(toml)
        out = d / "out"
        values = {"out": str(out), "dir": "/v", "variants": [{"variant": "a", "ko": "kvm-amd.ko"}, {"variant": "b", "ko": "bad.ko"}]}
        steps = d / "steps.sh"
        steps.write_text(Run.load(d / "run.toml").steps_file(values, 5))
        env = {**os.environ, "TSC_QEMU_OUT": str(out), "PATH": f"{fake}:{os.environ['PATH']}", "LOG": str(d / "log")}
        r = subprocess.run(["sh", str(RUNNER), str(steps)], env=env, capture_output=True, text=True, timeout=60)
        res = dict(ln.split("=", 1) for ln in (out / "results.txt").read_text().splitlines())
        self.assertEqual(r.returncode, 1, "a failed swap fails the run")
        self.assertEqual((res["a_modules_rc"], res["a_check_rc"], res["b_modules_rc"], res["b_check_rc"]), ("0", "0", "1", "blocked"))
        self.assertEqual(res["b_modules_error"], "insmod /v/b/bad.ko failed")
        self.assertEqual((out / "a" / "check.out").read_text(), "ran a\n")
        self.assertFalse((out / "b" / "check.out").exists())
        self.assertEqual((out / "a" / "dmesg.txt").read_text(), "[2] realkvm-group-begin a\n[3] in a\n")
        # /proc/modules has no kvm_amd here, so nothing is unloaded; the loads go in order.
        self.assertEqual((d / "log").read_text().split(), ["/v/a/kvm.ko", "/v/a/kvm-amd.ko", "/v/b/kvm.ko"])
        self.assertEqual(Run.load(d / "run.toml").step_names(values), ["a_check", "b_check"])

    def test_the_variants_run_gives_each_variant_check_and_restore(self):
        r = Run.load("variants")
        values = {"bin": "/opt/t", "vcpus": "2", "out": "/out",
                  "variants": [{"variant": "fix", "root_module": "kvm_intel", "root_ko": "kvm-intel"}]}
        self.assertEqual(r.step_names(values), ["fix_check", "fix_restore"])
        text = r.steps_file(values, 60)
        self.assertIn("begin 'fix' '/out/fix' 'kvm_intel' 'kvm' -- '/variants/fix/kvm.ko' '/variants/fix/kvm-intel.ko'\n", text)
        self.assertIn("step 'fix_check' '/out/fix/check.json' '/out/fix/check.stderr' '/opt/t' 'check' '--json'", text)
        self.assertTrue(text.rstrip().endswith("end 'fix'"))


def check_doc(verdicts, values=None):
    values = values or {}
    return {"checks": [{"number": n, "id": f"c{n}", "verdict": v, "reason": f"because {n}", "values": values.get(n, {})}
                       for n, v in sorted(verdicts.items())]}


class Judge(unittest.TestCase):
    def setUp(self):
        self.vdir = write_dir({"stock": STOCK, "fix": variant("fix", "fix", expect="8=PASS 9=PASS"),
                               "m": variant("m", base="fix", expect="5=FAIL")})
        self.art = Path(tempfile.mkdtemp(prefix="realkvm-judge."))
        self.addCleanup(shutil.rmtree, self.vdir, True)
        self.addCleanup(shutil.rmtree, self.art, True)
        (self.art / "qemu-svm").mkdir()
        (self.art / "qemu-svm" / "machine.txt").write_text("machine=qemu-svm\nvendor=svm\nrelease=6.12.117\n")

    def put(self, name, verdicts, values=None):
        d = self.art / "qemu-svm" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "check.json").write_text(json.dumps(check_doc(verdicts, values)))

    def judge(self):
        return variant_judge.main([str(self.art), "qemu-svm", "--dir", str(self.vdir)])

    def test_declared_verdicts_hold_and_a_mutant_is_killed_by_its_flip(self):
        base = {1: "PASS", 2: "PASS", 5: "PASS", 8: "FAIL", 9: "FAIL", 10: "FAIL"}
        self.put("stock", base)
        self.put("fix", {**base, 8: "PASS", 9: "PASS"})
        self.put("m", {**base, 5: "FAIL", 8: "PASS", 9: "PASS"})
        self.assertEqual(self.judge(), 0)
        s = json.loads((self.art / "summary.json").read_text())
        self.assertEqual(s["kills"], {"qemu-svm": {"m": [5]}})
        self.assertIn("| `m` | mutant | PASS | PASS | - | - | **FAIL** |", (self.art / "mutants.md").read_text())

    def test_a_verdict_off_its_declaration_its_base_or_its_numbers_fails(self):
        base = {1: "PASS", 3: "PASS", 5: "PASS", 8: "FAIL", 9: "FAIL", 10: "FAIL"}
        self.put("stock", base)
        # check 3 (declared nowhere) differs from the base; check 8 is declared PASS.
        self.put("fix", {**base, 3: "FAIL", 8: "FAIL", 9: "PASS"})
        self.put("m", {**base, 3: "FAIL", 5: "PASS", 8: "PASS", 9: "PASS"})
        self.assertEqual(self.judge(), 1)
        fails = json.loads((self.art / "summary.json").read_text())["failures"]
        self.assertTrue(any("fix] check 8" in f and "declared PASS" in f for f in fails), fails)
        self.assertTrue(any("fix] check 3" in f and "on its base stock" in f for f in fails), fails)
        self.assertTrue(any("m] check 5" in f and "declared FAIL" in f for f in fails), fails)
        self.assertIn("m (qemu-svm)", json.loads((self.art / "summary.json").read_text())["gaps"])

    def test_numbers_that_contradict_the_verdict_fail_it(self):
        followed = {"tsc_write": [{"tsc_moved_ns": 4e9, "kvmclock_advance_ns": 4.0001e9, "elapsed_ns": 1e5}]}
        base = {1: "PASS", 5: "PASS", 8: "FAIL", 9: "FAIL"}
        self.put("stock", base, {8: followed})
        self.put("fix", {**base, 8: "PASS", 9: "PASS"}, {8: followed, 1: {"offsets": [0, 5], "tsc_khz": [1, 1]}})
        self.put("m", {**base, 5: "FAIL", 8: "PASS", 9: "PASS"})
        self.assertEqual(self.judge(), 1)
        fails = json.loads((self.art / "summary.json").read_text())["failures"]
        self.assertTrue(any("fix] check 8" in f and "numbers allow only FAIL" in f for f in fails), fails)
        self.assertTrue(any("fix] check 1" in f and "numbers allow only FAIL" in f for f in fails), fails)

    def test_a_variant_that_did_not_run_fails(self):
        self.put("stock", {1: "PASS", 8: "FAIL", 9: "FAIL"})
        self.put("fix", {1: "PASS", 8: "PASS", 9: "PASS"})
        d = self.art / "qemu-svm" / "m"
        d.mkdir()
        (d / "wedged.txt").write_text("boot 1 (exit 124) ended while this variant's modules were in use\n")
        self.assertEqual(self.judge(), 1)


class Build(unittest.TestCase):
    """kernels/variant.build on a stand-in tree whose `make modules` copies a file into each .ko."""

    def test_a_variant_is_built_with_its_stack_applied_and_the_tree_left_clean(self):
        from realkvm.kernels import variant as kv
        d = Path(tempfile.mkdtemp(prefix="realkvm-vbuild."))
        self.addCleanup(shutil.rmtree, d, True)
        src, out = d / "src", d / "out"
        (src / "arch/x86/kvm").mkdir(parents=True)
        (src / "f.c").write_text("one\ntwo\nthree\n")
        (src / "Makefile").write_text("modules:\n\tfor k in kvm kvm-amd kvm-intel; do mkdir -p $(O)/arch/x86/kvm; "
                                      "cp f.c $(O)/arch/x86/kvm/$$k.ko; done\n")
        (out / "build").mkdir(parents=True)
        (out / "build/.config").write_text("CONFIG_KVM=m\n")
        (out / "modules/lib/modules/6.12.0").mkdir(parents=True)
        for k in kv.KVM_KO:
            (out / "modules/lib/modules/6.12.0" / k).write_text("stock\n")
        (out / "bzImage").write_bytes(b"x")
        (out / "build-info.txt").write_text(f"kernel_release=6.12.0\nkvm=m\nsource_dir={src}\n")
        second = "--- a/f.c\n+++ b/f.c\n@@ -1,3 +1,3 @@\n one\n TWO\n-three\n+THREE\n"
        vdir = write_dir({"stock": STOCK, "fix": variant("fix", "fix"), "m": variant("m", base="fix", diff=second)})
        self.addCleanup(shutil.rmtree, vdir, True)
        variants = vdata.load(vdir)
        base = kv.Base(out)
        logs = []
        m = kv.build(base, variants, "m", d / "cache", 1, logs.append)
        self.assertEqual((m / "kvm-amd.ko").read_text(), "one\nTWO\nTHREE\n")
        self.assertEqual((src / "f.c").read_text(), "one\ntwo\nthree\n", "the tree is clean again")
        self.assertEqual((kv.build(base, variants, "stock", d / "cache", 1, logs.append) / "kvm.ko").read_text(), "stock\n")
        self.assertEqual(kv.build(base, variants, "m", d / "cache", 1, logs.append), m, "cached")
        self.assertEqual(len([x for x in logs if x.startswith("built m")]), 1)
        # A build cut off with its patch in the tree is undone first.
        (src / "f.c").write_text("one\nTWO\nthree\n")
        (src / kv.APPLIED).write_text(variants["fix"].diff)
        f = kv.build(base, variants, "fix", d / "cache", 1, logs.append)
        self.assertEqual(((f / "kvm.ko").read_text(), (src / "f.c").read_text()), ("one\nTWO\nthree\n", "one\ntwo\nthree\n"))
        # A patch that does not apply names the variant and leaves the tree as it was.
        bad = write_dir({"stock": STOCK, "x": variant("x", kind="fix", diff=DIFF.replace("two", "zzz"))})
        self.addCleanup(shutil.rmtree, bad, True)
        with self.assertRaises(Fail) as e:
            kv.build(base, vdata.load(bad), "x", d / "cache", 1, logs.append)
        self.assertIn("x.patch does not apply", e.exception.message)
        self.assertEqual((src / "f.c").read_text(), "one\ntwo\nthree\n")


if __name__ == "__main__":
    unittest.main()


class Usage(unittest.TestCase):
    def test_bad_options_are_refused_before_anything_is_built(self):
        cases = [
            (["--machines", "nope"], "no machine 'nope' in machines.toml"),
            (["--variants", "nope"], "no variant nope in"),
            (["--base", "/x", "--suite", "trixie"], "--base and --suite: give one"),
            (["--smp", "0"], "--smp/--vcpus must be an integer from 1 to 64"),
            (["--boot-timeout", "soon"], "--boot-timeout must be a positive integer"),
            (["--frobnicate"], "unknown argument '--frobnicate'"),
            (["--base", "/nonexistent/out"], "no finished build-kernel output"),
        ]
        for argv, text in cases:
            with self.subTest(argv=argv):
                rc, out = support.run([sys.executable, str(support.ENTRY), "variants", *argv], timeout=60)
                self.assertEqual(rc, 2, out)
                self.assertIn(text, out)
