"""Debian's kernels: the newest kernel of a suite and flavour.

--suite takes any Debian suite with an amd64 kernel: a release (bullseye,
bookworm, trixie, ...; also the aliases oldstable, stable, testing),
sid/unstable, experimental, or a backports suite. Which exist is the
archive's business: an unknown name is found out by apt (no Release file)
and reported with the names distro-info-data knows. --flavour picks
linux-image-FLAVOUR; an unknown one is reported with the flavours the suite
has. The kernel is the package linux-image-FLAVOUR points at; both
packagings work (one linux-image-REL package, or from 7.x an empty
linux-image-REL with the kernel in linux-binary-REL and the modules in
linux-modules-REL).

Cache (shared with the bash harness before it):
  CACHE/apt/<suite>/: the suite's private apt state (apt.PrivateApt)
  CACHE/kernels/<suite>/<flavour>/<package>_<version>/: vmlinuz,
  kernel-release, origin, and per root module ROOT (every kvm_module of
  machines.toml) modules.load.ROOT with the modules it names, uncompressed.
  (An entry of the bash harness has one modules.load, whose last module is
  its root.)
"""

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .. import apt
from .. import modules as mods
from ..errors import EX_HOST, EX_USAGE, Fail
from . import Resolved

DEFAULT_SUITE = "bookworm"
DEFAULT_FLAVOUR = "amd64"
SUITE_RE = re.compile(r"^[a-z]+(-backports(-sloppy)?)?$")
FLAVOUR_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME") or "/root", ".cache")
    return Path(base) / "tsc-rendezvous" / "qemu-kvm"


def check_names(suite, flavour):
    if not SUITE_RE.match(suite):
        raise Fail(
            EX_USAGE,
            f"--suite '{suite}' is not a Debian suite name (a codename or alias such as bookworm, trixie, sid, "
            "stable, optionally with -backports)",
        )
    if not FLAVOUR_RE.match(flavour):
        raise Fail(EX_USAGE, f"--flavour '{flavour}' is not a kernel flavour name (such as amd64, cloud-amd64, rt-amd64)")


def entry_modules(entry, root):
    """The load order file of `root` in a cache entry, or None."""
    f = entry / f"modules.load.{root}"
    if f.is_file():
        return f
    legacy = entry / "modules.load"
    if legacy.is_file():
        names = legacy.read_text().split()
        if names and mods.norm(names[-1]) == root:
            return legacy
    return None


def complete(entry, root):
    return (entry / "vmlinuz").is_file() and (entry / "kernel-release").is_file() and entry_modules(entry, root) is not None


class DebianKernel:
    kind = "debian"

    def __init__(self, suite, flavour, root_module, all_roots, host, refresh=False, log=print):
        check_names(suite, flavour)
        self.suite, self.flavour, self.refresh = suite, flavour, refresh
        self.root = mods.norm(root_module)
        # Every root module a machine may want: one download serves them all.
        self.roots = sorted({self.root, *(mods.norm(r) for r in all_roots)})
        self.host = host
        self.log = log
        self.cache = cache_dir()
        self.kroot = self.cache / "kernels" / suite / flavour
        self.papt = apt.PrivateApt(self.cache / "apt" / suite)
        self.updated = False
        self.suite_missing = False

    def describe(self):
        return f"Debian {self.suite}, {self.flavour}"

    # ---------------------------------------------------------------- apt
    def _apt(self, tool, *args, **kw):
        return subprocess.run([tool, *self.papt.opts(), *args], env=apt.env(), **kw)

    def _query(self, *args):
        return self._apt("apt-cache", *args, capture_output=True, text=True).stdout

    def setup(self):
        self.host.ensure_keyring()
        self.papt.prepare(apt.suite_sources(self.suite, self.host.archive()))

    def update(self):
        """Updates the private lists. False when the suite's own lists could
        not be had; a missing SUITE-updates or SUITE-security (a release in
        development has none) is fine. Sets suite_missing when the archive
        has no such suite."""
        self.updated = True
        self.log(f"updating the private package lists for Debian {self.suite} ({self.papt.dir}) from {self.host.archive().mirror}")
        r = self._apt("apt-get", "update", "-qq", capture_output=True, text=True)
        errs = r.stderr
        (self.papt.dir / "update-errors.txt").write_text(errs)
        if r.returncode == 0:
            return True
        if f" {self.suite} Release' does not have a Release file" in errs:
            self.suite_missing = True
            return False
        if self.papt.has_lists(self.suite) and not re.search(r"^[EW]: Failed to fetch|Could not resolve", errs, re.M):
            return True
        for line in errs.splitlines():
            self.log(f"  apt: {line}")
        self.log(f"warning: apt-get update for {self.suite} failed")
        return False

    def flavours(self):
        names = self._query("pkgnames", "linux-image-").split()
        out = sorted(
            {n[len("linux-image-"):] for n in names if re.match(r"^linux-image-[a-z][a-z0-9-]*$", n) and not re.search(r"-(dbg|template)$", n)}
        )
        return out

    def _depends(self, pkg, pattern):
        out = []
        for line in self._query("depends", pkg).splitlines():
            w = line.split()
            if len(w) >= 2 and re.match(r"^\|?Depends:$", w[0]) and re.match(pattern, w[1]):
                out.append(w[1])
        return out

    def kernel_pkg(self):
        """The versioned package the metapackage points at, e.g. linux-image-6.1.0-57-amd64."""
        d = self._depends(f"linux-image-{self.flavour}", r"^linux-image-[0-9]")
        return d[0] if d else ""

    def payload_pkgs(self, pkg):
        split = sorted(set(self._depends(pkg, r"^linux-(binary|modules)-[0-9]")))
        return split or [pkg]

    def version(self, pkg):
        for line in self._query("show", "--no-all-versions", pkg).splitlines():
            if line.startswith("Version:"):
                return line.split()[1]
        return ""

    def existing_suites(self):
        """The Debian suites that exist now, for the message about an unknown
        one: the newest five release codenames distro-info-data knows, sid and
        experimental, and each release's backports suite, kept if the archive
        has a Release file for it (apt fetches only the Release files)."""
        cand = []
        csv = Path("/usr/share/distro-info/debian.csv")
        if csv.is_file():
            rows = [ln.split(",") for ln in csv.read_text().splitlines()[1:]]
            cand = [r[2] for r in rows if len(r) > 2 and r[0].isdigit()][-5:]
        cand = cand or ["bullseye", "bookworm", "trixie", "forky"]
        cand += [f"{s}-backports" for s in cand] + ["sid", "experimental"]
        probe = apt.PrivateApt(self.cache / "apt" / ".suites")
        archive = self.host.archive()
        try:
            probe.prepare("".join(f"deb [signed-by={apt.KEYRING}] {archive.mirror} {s} main\n" for s in cand))
            for f in (probe.dir / "lists").glob("*_InRelease"):
                f.unlink()
        except OSError:
            return " ".join(cand)
        off = [f"Acquire::IndexTargets::deb::{t}::DefaultEnabled=false" for t in ("Packages", "DEP-11", "DEP-11-icons", "DEP-11-icons-small", "Contents-deb")]
        subprocess.run(
            ["apt-get", *probe.opts(), *[x for o in off for x in ("-o", o)], "update", "-qq"],
            env=apt.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        found = [s for s in cand if list((probe.dir / "lists").glob(f"*_dists_{s}_InRelease"))]
        return " ".join(found) if found else " ".join(cand) + " (not checked: the archive did not answer)"

    # ---------------------------------------------------------------- cache
    def newest_cached(self):
        best = None
        if self.kroot.is_dir():
            for e in self.kroot.iterdir():
                if complete(e, self.root):
                    t = (e / "kernel-release").stat().st_mtime
                    if best is None or t > best[0]:
                        best = (t, e)
        return best[1] if best else None

    def fetch(self, pkg, ver, dest):
        """Downloads and extracts the kernel package into `dest`."""
        payload = self.payload_pkgs(pkg)
        specs = [f"{p}={v}" if (v := self.version(p)) else p for p in payload]
        self.cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.cache, prefix=".fetch.") as tmp:
            tmp = Path(tmp)
            self.log(f"downloading {' '.join(specs)} from Debian {self.suite} (about 70-130 MB, once)")
            if self._apt("apt-get", "download", "-qq", *specs, cwd=tmp, stdout=2).returncode != 0:
                return False
            debs = sorted(tmp.glob("*.deb"))
            if not debs:
                self.log("apt-get download left no .deb")
                return False
            x = tmp / "x"
            for deb in debs:
                if subprocess.run(["dpkg", "-x", str(deb), str(x)]).returncode != 0:
                    return False
            out = tmp / "out"
            out.mkdir()
            vml = sorted((x / "boot").glob("vmlinuz-*")) if (x / "boot").is_dir() else []
            if vml:
                vmlinuz, rel = vml[0], vml[0].name[len("vmlinuz-"):]
            else:
                found = sorted((x / "usr/lib/modules").glob("*/vmlinuz")) + sorted((x / "lib/modules").glob("*/vmlinuz"))
                if not found:
                    self.log(f"no boot/vmlinuz-* nor usr/lib/modules/*/vmlinuz in {' '.join(payload)}")
                    return False
                vmlinuz, rel = found[0], found[0].parent.name
            shutil.copyfile(vmlinuz, out / "vmlinuz")
            (out / "kernel-release").write_text(rel + "\n")
            moddir = None
            for d in (x / "lib/modules" / rel, x / "usr/lib/modules" / rel):
                if d.is_dir() and mods.module_files(d)[0]:
                    moddir = d
                    break
            if moddir is None:
                self.log(f"no modules under (usr/)lib/modules/{rel} in {' '.join(payload)}")
                return False
            files, _ = mods.module_files(moddir)
            for root in self.roots:
                if root not in files:
                    if root == self.root:
                        self.log(f"no {root.replace('_', '-')}.ko in {' '.join(payload)}")
                        return False
                    continue
                try:
                    order = mods.closure(files, root, rel, self.log if root == self.root else None)
                except mods.ModuleError as e:
                    if root == self.root:
                        self.log(str(e))
                        return False
                    self.log(f"note: no {root} closure in this kernel ({e})")
                    continue
                names = []
                for _n, p, data in order:
                    b = mods.base_name(p)
                    (out / f"{b}.ko").write_bytes(data)
                    names.append(b)
                (out / f"modules.load.{root}").write_text("".join(n + "\n" for n in names))
            (out / "origin").write_text(f"{self.suite} {self.flavour} {pkg} {ver} ({' '.join(payload)})\n")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(dest, ignore_errors=True)
            shutil.move(str(out), str(dest))
        return True

    # ---------------------------------------------------------------- resolve
    def entry(self):
        """The cache entry of the kernel to boot, downloading it if needed."""
        self.cache.mkdir(parents=True, exist_ok=True)
        with open(self.cache / ".lock", "w") as lock:
            # Serialise runs sharing the cache (a fetch is not atomic otherwise).
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._entry()

    def _entry(self):
        if not self.refresh:
            newest = self.newest_cached()
            if newest is not None:
                return newest
        self.setup()
        if self.refresh or not self.papt.has_lists(self.suite):
            self.update()
        if self.suite_missing:
            shutil.rmtree(self.papt.dir, ignore_errors=True)  # nothing worth keeping
            self.log("looking up which Debian suites exist")
            raise Fail(
                EX_USAGE,
                f"Debian has no suite '{self.suite}' (the archive has no Release file for it). Suites that exist: "
                f"{self.existing_suites()}; also the aliases oldstable, stable, testing, unstable and their -backports",
            )
        for attempt in (1, 2):
            pkg = self.kernel_pkg()
            if not pkg and self.papt.has_lists(self.suite):
                # Current lists without the flavour: say what there is (no update helps).
                fl = self.flavours()
                if self.updated or (fl and self.flavour not in fl):
                    if not fl:
                        raise Fail(EX_USAGE, f"Debian {self.suite} has no amd64 kernel (no linux-image-* metapackage in its lists)")
                    if self.flavour not in fl:
                        raise Fail(
                            EX_USAGE,
                            f"Debian {self.suite} has no kernel flavour '{self.flavour}' (no linux-image-{self.flavour}). "
                            f"Flavours there: {' '.join(fl)}",
                        )
            if not pkg:
                if attempt == 1 and not self.updated and self.update():
                    continue
                if self.papt.has_lists(self.suite):
                    self.log(f"linux-image-{self.flavour} of {self.suite} does not point at a linux-image-* package")
                else:
                    self.log(f"no package lists for {self.suite} (apt-get update could not fetch them: offline?)")
                break
            ver = self.version(pkg)
            dest = self.kroot / f"{pkg}_{ver.replace(':', '%')}"
            if complete(dest, self.root):
                return dest
            if self.fetch(pkg, ver, dest):
                return dest
            # Stale package lists point at versions the archive has removed: update, retry.
            if attempt == 1 and not self.updated and self.update():
                continue
            break
        # Offline or apt broken: fall back to whatever kernel of this suite is cached.
        newest = self.newest_cached()
        if newest is not None:
            self.log(f"warning: could not resolve/download the current {self.suite} kernel package; using cached {newest}")
            return newest
        raise Fail(
            EX_HOST,
            f"could not obtain Debian {self.suite}'s {self.flavour} kernel "
            f"(apt-get download of linux-image-{self.flavour}'s packages failed)",
        )

    def resolve(self, log):
        e = self.entry()
        release = (e / "kernel-release").read_text().strip()
        names = entry_modules(e, self.root).read_text().split()
        loaded = [(n, (e / f"{n}.ko").read_bytes()) for n in names]
        log(f"modules to load, dependencies first: {' '.join(names)}")
        return Resolved(e / "vmlinuz", release, f"kernel {release} ({self.describe()})", loaded)
