"""The host's own packages: what the harness installs with apt-get.

Host tools come from the machine's own apt sources (`apt-get install`), the
kernels from private apt state (see apt.py). Machines name their emulator's
packages (`Machine.packages()`); a machine may instead define
`prepare_host(host)` to install them itself (QEMU: from backports).
"""

import shutil
import subprocess
from pathlib import Path

from . import apt
from .elf import static_x86_64_problem
from .errors import EX_HOST, Fail


class Host:
    def __init__(self, log, apt_root="/", mirror="", security=""):
        self.log = log
        self.apt_root = apt_root
        self.mirror = mirror
        self.security = security
        self.updated = False
        self._archive = None

    def archive(self):
        if self._archive is None:
            self._archive = apt.Archive.from_apt(self.apt_root, self.mirror, self.security)
        return self._archive

    def update_once(self):
        """apt-get update of the machine's lists, once; False when it failed
        (offline): callers decide whether that is fatal."""
        if self.updated:
            return True
        self.updated = True
        self.log("apt-get update")
        r = subprocess.run(["apt-get", "update", "-qq"], env=apt.env(), stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            self.log("warning: apt-get update failed")
            return False
        return True

    def installed(self, package):
        r = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
        )
        return r.returncode == 0 and "install ok installed" in r.stdout

    def install(self, *packages, target=()):
        if not self.update_once():
            raise Fail(EX_HOST, f"cannot install {' '.join(packages)} without package lists")
        self.log(f"installing {' '.join(packages)}")
        cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *target, *packages]
        # apt's output goes to stderr: stdout is the console copy.
        if subprocess.run(cmd, env=apt.env(), stdout=2).returncode != 0:
            raise Fail(EX_HOST, f"apt-get install {' '.join(packages)} failed")

    def ensure(self, packages):
        missing = [p for p in packages if not self.installed(p)]
        if missing:
            self.install(*missing)

    def ensure_keyring(self):
        if not Path(apt.KEYRING).is_file():
            self.install("debian-archive-keyring")

    def codename(self):
        try:
            for line in Path(self.apt_root, "etc/os-release").read_text().splitlines():
                if line.startswith("VERSION_CODENAME="):
                    return line.split("=", 1)[1].strip().strip('"')
        except OSError:
            pass
        return ""

    def enable_backports(self, codename):
        """Lets the machine's apt see CODENAME-backports of the archive it
        already uses (default priority 100: nothing else is taken from it
        unless asked for with -t), unless some source has it already."""
        if apt.has_suite(self.apt_root, f"{codename}-backports"):
            policy = subprocess.run(["apt-cache", "policy"], capture_output=True, text=True).stdout
            if f" {codename}-backports/main " not in policy:
                self.updated = False  # the source is there, its lists are not
            if not self.update_once():
                raise Fail(EX_HOST, f"cannot read Debian {codename}-backports's package lists")
            return
        self.ensure_keyring()
        f = Path(self.apt_root, f"etc/apt/sources.list.d/tsc-rendezvous-{codename}-backports.sources")
        self.log(f"adding Debian {codename}-backports to apt's sources ({f}), for the emulator")
        try:
            f.write_text(apt.backports_sources(codename, self.archive()))
        except OSError as e:
            raise Fail(EX_HOST, f"cannot write {f}: {e}") from None
        self.updated = False
        if not self.update_once():
            raise Fail(EX_HOST, f"cannot read Debian {codename}-backports's package lists")

    def simulate_removals(self, packages, target=()):
        r = subprocess.run(
            ["apt-get", "-s", "install", "--no-install-recommends", *target, *packages],
            env=apt.env(), capture_output=True, text=True,
        )
        return [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("Remv ")]

    def static_busybox(self):
        """A statically linked busybox (the initramfs has no libc), installing
        busybox-static when there is none. Debian's dynamic `busybox` and
        `busybox-static` both ship /bin/busybox and conflict."""

        def find():
            bb = shutil.which("busybox")
            return bb if bb and static_x86_64_problem(bb) is None else None

        bb = find()
        if bb is None:
            self.install("busybox-static")
            bb = find()
        if bb is None:
            raise Fail(EX_HOST, "no statically linked busybox found even after installing busybox-static")
        return bb
