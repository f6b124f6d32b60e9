"""The module closure: .modinfo read from ELF files written here (and from a
real .ko when this machine has one), dependencies first, for kvm_amd and
kvm_intel, compressed or not; the --modules directory forms; the cache
entry's load order per root module."""

import glob
import gzip
import lzma
import os
import platform
import tempfile
import unittest
from pathlib import Path

import support
from realkvm import modules as mods
from realkvm.errors import Fail
from realkvm.kernels import debian, tree

REL = "6.12.0-test"
VM = f"{REL} SMP preempt mod_unload modversions "


def tree_of(files, root=None):
    d = Path(root or tempfile.mkdtemp(prefix="realkvm-mods."))
    for rel, data in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return d


DEBIAN_6_12 = {  # the layout and dependencies of Debian's 6.12 (.ko.xz)
    "kernel/virt/lib/irqbypass.ko.xz": lzma.compress(support.ko("", VM)),
    "kernel/arch/x86/kvm/kvm.ko.xz": lzma.compress(support.ko("irqbypass", VM)),
    "kernel/arch/x86/kvm/kvm-amd.ko.xz": lzma.compress(support.ko("kvm,ccp", VM)),
    "kernel/arch/x86/kvm/kvm-intel.ko.xz": lzma.compress(support.ko("kvm", VM)),
    "kernel/drivers/crypto/ccp/ccp.ko.xz": lzma.compress(support.ko("", VM)),
    "kernel/fs/ext4/ext4.ko.xz": lzma.compress(support.ko("jbd2,mbcache", VM)),
}


class Closure(unittest.TestCase):
    def order(self, d, root, release=REL):
        files, _ = mods.module_files(d)
        return [mods.base_name(p) for _n, p, _d in mods.closure(files, root, release)]

    def test_kvm_intel_needs_irqbypass_and_kvm_and_no_ccp(self):
        self.assertEqual(self.order(tree_of(DEBIAN_6_12), "kvm_intel"), ["irqbypass", "kvm", "kvm-intel"])

    def test_kvm_amd_needs_ccp_too(self):
        self.assertEqual(self.order(tree_of(DEBIAN_6_12), "kvm_amd"), ["irqbypass", "kvm", "ccp", "kvm-amd"])

    def test_5_10s_ccp_needs_rng_core_first(self):
        d = tree_of({
            "kvm.ko": support.ko("irqbypass", VM), "irqbypass.ko": support.ko("", VM),
            "ccp.ko": support.ko("rng-core", VM), "rng-core.ko": support.ko("", VM), "kvm-amd.ko": support.ko("kvm,ccp", VM),
        })
        self.assertEqual(self.order(d, "kvm-amd"), ["irqbypass", "kvm", "rng-core", "ccp", "kvm-amd"])

    def test_gzip_and_a_dependency_built_in(self):
        d = tree_of({"kvm_intel.ko.gz": gzip.compress(support.ko("kvm", VM))})  # kvm built in
        notes = []
        files, _ = mods.module_files(d)
        order = mods.closure(files, "kvm_intel", REL, notes.append)
        self.assertEqual([mods.base_name(p) for _n, p, _d in order], ["kvm_intel"])
        self.assertTrue(order[0][2].startswith(b"\x7fELF"), "unpacked to the plain ELF insmod takes")
        self.assertIn("kvm (needed by kvm_intel)", notes[0])

    def test_a_module_of_another_release_is_refused(self):
        d = tree_of({"kvm.ko": support.ko("", "6.1.0-9-amd64 SMP "), "kvm-intel.ko": support.ko("kvm", VM)})
        with self.assertRaises(mods.ModuleError) as e:
            self.order(d, "kvm_intel")
        self.assertIn("built for kernel 6.1.0-9-amd64", str(e.exception))

    def test_a_cycle_is_said(self):
        d = tree_of({"a.ko": support.ko("b", VM), "b.ko": support.ko("a", VM)})
        with self.assertRaises(mods.ModuleError) as e:
            self.order(d, "a")
        self.assertIn("cycle: a -> b -> a", str(e.exception))

    def test_real_kvm_modules(self):
        """This machine's kvm.ko, or the harness's cached Debian modules, when there are any."""
        found = glob.glob(f"/lib/modules/{platform.release()}/kernel/arch/x86/kvm/kvm*.ko*")
        found += glob.glob(str(debian.cache_dir() / "kernels/*/*/*/kvm*.ko"))
        if not found:
            self.skipTest("no kvm*.ko on this machine")
        for path in found:
            info = mods.modinfo(mods.unpack(path))
            name = mods.module_name(os.path.basename(path))
            deps = set(filter(None, info["depends"][0].split(",")))
            self.assertTrue(info["vermagic"][0].split()[0], path)
            if name == "kvm_intel":
                self.assertEqual(deps, {"kvm"}, path)
            elif name == "kvm_amd":
                self.assertIn("kvm", deps, path)
            elif name == "kvm":
                self.assertIn("irqbypass", deps, path)


class ModulesOption(unittest.TestCase):
    def test_an_install_mod_path_tree_picks_the_kernels_release(self):
        d = tree_of({f"lib/modules/{REL}/kernel/arch/x86/kvm/{k}": v for k, v in
                     {"kvm.ko": support.ko("", VM), "kvm-intel.ko": support.ko("kvm", VM)}.items()})
        tree_of({"lib/modules/other/kvm-intel.ko": support.ko("", "other ")}, d)
        self.assertEqual(tree.module_dir(d, REL, "kvm_intel"), d / "lib/modules" / REL)
        with self.assertRaises(Fail) as e:
            tree.module_dir(d, "", "kvm_intel")
        self.assertIn("several releases", e.exception.message)

    def test_the_root_module_must_be_there(self):
        d = tree_of({"kvm.ko": support.ko("", VM), "kvm-amd.ko": support.ko("kvm", VM)})
        with self.assertRaises(Fail) as e:
            tree.module_dir(d, REL, "kvm_intel")
        self.assertIn("no kvm-intel.ko under", e.exception.message)
        self.assertEqual(tree.module_dir(d, REL, "kvm_amd"), d.resolve())


class BuiltTree(unittest.TestCase):
    def test_a_built_tree_resolves_to_its_image_and_closure(self):
        d = tree_of({f"lib/modules/{REL}/kernel/{k}": v for k, v in {
            "virt/lib/irqbypass.ko": support.ko("", VM), "arch/x86/kvm/kvm.ko": support.ko("irqbypass", VM),
            "arch/x86/kvm/kvm-intel.ko": support.ko("kvm", VM), "arch/x86/kvm/kvm-amd.ko": support.ko("kvm", VM)}.items()})
        image = d / "bzImage"
        support.bzimage(image, REL)
        notes = []
        k = tree.BuiltKernel(image, d, "kvm_intel").resolve(notes.append)
        self.assertEqual((k.image, k.release, [n for n, _ in k.modules]), (image, REL, ["irqbypass", "kvm", "kvm-intel"]))
        self.assertIn(f"kernel {REL} ({image})", k.desc)
        # KVM built in: no modules.
        self.assertEqual(tree.BuiltKernel(image, None, "kvm_amd").resolve(notes.append).modules, [])
        self.assertIn("assuming KVM (kvm_amd) is built into", notes[-1])


class TuxmakeOutput(unittest.TestCase):
    def test_a_tuxmake_output_directory_is_a_kernel_with_its_modules_tarball(self):
        import io
        import json as j
        import tarfile
        out = Path(tempfile.mkdtemp())
        support.bzimage(out / "bzImage", REL)
        with tarfile.open(out / "modules.tar.xz", "w:xz") as t:
            for name, data in {"kvm.ko": support.ko("irqbypass", VM), "kvm-amd.ko": support.ko("kvm", VM),
                               "irqbypass.ko": support.ko("", VM)}.items():
                info = tarfile.TarInfo(f"lib/modules/{REL}/kernel/{name}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        (out / "metadata.json").write_text(j.dumps({"results": {"artifacts": {
            "kernel": ["bzImage"], "modules": ["modules.tar.xz"]}}}))
        notes = []
        k = tree.BuiltKernel(out, None, "kvm_amd").resolve(notes.append)
        self.assertEqual((k.image, k.release), ((out / "bzImage").resolve(), REL))
        self.assertEqual([n for n, _ in k.modules], ["irqbypass", "kvm", "kvm-amd"])
        # Without metadata.json it is just a directory, not a bzImage.
        (out / "metadata.json").unlink()
        with self.assertRaises(Fail):
            tree.BuiltKernel(out, None, "kvm_amd")


class CacheEntries(unittest.TestCase):
    def test_an_entry_has_a_load_order_per_root_and_a_bash_era_one_for_its_root(self):
        e = Path(tempfile.mkdtemp())
        for f in ("vmlinuz", "kernel-release"):
            (e / f).write_text("x\n")
        (e / "modules.load").write_text("irqbypass\nkvm\nccp\nkvm-amd\n")
        self.assertTrue(debian.complete(e, "kvm_amd"))
        self.assertFalse(debian.complete(e, "kvm_intel"), "a bash-era entry has kvm_amd's closure only")
        (e / "modules.load.kvm_intel").write_text("irqbypass\nkvm\nkvm-intel\n")
        self.assertTrue(debian.complete(e, "kvm_intel"))
        os.remove(e / "vmlinuz")
        self.assertFalse(debian.complete(e, "kvm_amd"))


if __name__ == "__main__":
    unittest.main()
