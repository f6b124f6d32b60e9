"""Debian's archive comes from the machine's apt configuration (or --mirror),
never from a host name in the code: a fake apt configuration under a temp
root, in both formats, with made-up mirrors, must come out exactly in the
private sources.list the harness writes."""

import os
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import support  # noqa: F401  (the import path)
from realkvm import apt
from realkvm.errors import EX_HOST, Fail
from realkvm.host import Host
from realkvm.kernels.debian import DebianKernel

MAIN = "http://mirror.example.invalid/debian"
SEC = "http://security-mirror.example.invalid/debian-security"
OTHER = "https://other.example.invalid/debian/"
KEY = "/usr/share/keyrings/debian-archive-keyring.gpg"

ONE_LINE = f"""\
# the machine's sources, one-line format
deb [arch=amd64 signed-by={KEY}] {MAIN} bookworm main contrib
deb {MAIN} bookworm-updates main
deb-src {MAIN} bookworm main
deb {SEC} bookworm-security main
deb [signed-by=/usr/share/keyrings/nodesource.gpg] https://deb.nodesource.example.invalid/node_20.x nodistro main
"""

DEB822 = f"""\
Types: deb
# a comment inside the paragraph
URIs: {MAIN}
Suites: bookworm bookworm-updates
Components: main
Signed-By: {KEY}

Types: deb
URIs: {SEC}
Suites: bookworm-security
Components: main
Signed-By: {KEY}

Types: deb
URIs: https://disabled.example.invalid/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs: https://packages.example.invalid/apt
Suites: stable-thirdparty
Components: main
"""


def fake_root(one_line="", deb822="", extra_list=""):
    root = Path(tempfile.mkdtemp(prefix="realkvm-apt."))
    (root / "etc/apt/sources.list.d").mkdir(parents=True)
    if one_line:
        (root / "etc/apt/sources.list").write_text(one_line)
    if deb822:
        (root / "etc/apt/sources.list.d/debian.sources").write_text(deb822)
    if extra_list:
        (root / "etc/apt/sources.list.d/extra.list").write_text(extra_list)
    (root / "etc/os-release").write_text('NAME="Debian GNU/Linux"\nVERSION_CODENAME=bookworm\n')
    return root


class Archive(unittest.TestCase):
    def test_one_line_format(self):
        a = apt.Archive.from_apt(fake_root(one_line=ONE_LINE))
        self.assertEqual((a.mirror, a.security), (MAIN, SEC))

    def test_deb822_format(self):
        a = apt.Archive.from_apt(fake_root(deb822=DEB822))
        self.assertEqual((a.mirror, a.security), (MAIN, SEC))

    def test_the_mirror_option_wins(self):
        a = apt.Archive.from_apt(fake_root(deb822=DEB822), mirror=OTHER)
        self.assertEqual((a.mirror, a.security), (OTHER.rstrip("/"), SEC))
        b = apt.Archive.from_apt(fake_root(deb822=DEB822), mirror=OTHER, security="http://s.example.invalid/x")
        self.assertEqual(b.security, "http://s.example.invalid/x")

    def test_a_third_party_source_first_is_not_debian(self):
        third = "deb [signed-by=/usr/share/keyrings/vendor.gpg] https://vendor.example.invalid/apt stable-vendor main\n"
        a = apt.Archive.from_apt(fake_root(one_line=third + ONE_LINE))
        self.assertEqual(a.mirror, MAIN)

    def test_debian_signed_entries_are_preferred(self):
        other_key = f"deb [signed-by=/etc/apt/keyrings/mine.gpg] {OTHER} bookworm main\n"
        a = apt.Archive.from_apt(fake_root(one_line=other_key + ONE_LINE))
        self.assertEqual(a.mirror, MAIN)

    def test_no_debian_archive_asks_for_the_mirror_option(self):
        with self.assertRaises(Fail) as e:
            apt.Archive.from_apt(fake_root(deb822="Types: deb\nURIs: https://x.example.invalid/\nSuites: nodistro\nComponents: main\n"))
        self.assertEqual(e.exception.code, EX_HOST)
        self.assertIn("--mirror", e.exception.message)


class PrivateSources(unittest.TestCase):
    """What the harness writes: the suite's private sources.list, and the
    backports source for the emulator."""

    def kernel(self, root, suite="trixie", **host_kw):
        cache = tempfile.mkdtemp(prefix="realkvm-cache.")
        host = Host(lambda *a: None, apt_root=root, **host_kw)
        host.ensure_keyring = lambda: None
        with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": cache}):
            k = DebianKernel(suite, "amd64", "kvm_amd", ["kvm_intel"], host, log=lambda *a: None)
        k.setup()
        return (k.papt.dir / "sources.list").read_text()

    def test_the_private_sources_list_uses_exactly_the_machines_archive(self):
        for kind in ("one_line", "deb822"):
            root = fake_root(one_line=ONE_LINE) if kind == "one_line" else fake_root(deb822=DEB822)
            self.assertEqual(
                self.kernel(root),
                f"deb [signed-by={KEY}] {MAIN} trixie main\n"
                f"deb [signed-by={KEY}] {MAIN} trixie-updates main\n"
                f"deb [signed-by={KEY}] {SEC} trixie-security main\n",
                kind,
            )

    def test_the_private_sources_list_uses_the_mirror_option(self):
        text = self.kernel(fake_root(deb822=DEB822), suite="sid", mirror=OTHER)
        self.assertEqual(text, f"deb [signed-by={KEY}] {OTHER.rstrip('/')} sid main\n")

    def test_the_backports_source_uses_the_machines_archive(self):
        root = fake_root(deb822=DEB822)
        host = Host(lambda *a: None, apt_root=root)
        host.ensure_keyring = lambda: None
        host.update_once = lambda: True
        host.enable_backports("bookworm")
        f = root / "etc/apt/sources.list.d/tsc-rendezvous-bookworm-backports.sources"
        self.assertEqual(
            f.read_text(), f"Types: deb\nURIs: {MAIN}\nSuites: bookworm-backports\nComponents: main\nSigned-By: {KEY}\n"
        )
        self.assertTrue(apt.has_suite(root, "bookworm-backports"))


if __name__ == "__main__":
    unittest.main()
