"""No package archive's host name in tools/, .ci/ or docs/: the harness takes
Debian's archive from the machine's apt configuration or --mirror.

The test writes no host name itself. It fails on
- any host that this machine's apt configuration names (its URIs, and hosts in
  its comments, e.g. a snapshot archive's), and any other host of their
  domains (the last two labels of each);
- any URL whose path looks like a Debian or Ubuntu archive (/debian,
  /debian-security, /debian-ports, /ubuntu), unless its host is a reserved
  example name (.invalid, .example, .test).
"""

import re
import subprocess
import unittest
from pathlib import Path

import support

DIRS = ("tools", ".ci", "docs")
URL_RE = re.compile(r"\b(?:https?|ftp)://([A-Za-z0-9.-]+)(/[^\s'\"<>)\]]*)?")
ARCHIVE_PATH_RE = re.compile(r"^/(debian|debian-security|debian-ports|ubuntu)(/|$)")
RESERVED = (".invalid", ".example", ".test", "localhost")


def apt_hosts(root="/"):
    hosts = set()
    etc = Path(root) / "etc/apt"
    files = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*"))] if etc.is_dir() else []
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        hosts |= {m.group(1).lower() for m in URL_RE.finditer(text)}
    return {h for h in hosts if not h.endswith(RESERVED)}


def domains(hosts):
    return {".".join(h.split(".")[-2:]) for h in hosts if h.count(".") >= 1}


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z", *DIRS], cwd=support.REPO, capture_output=True, check=True).stdout
    return [support.REPO / p for p in out.decode().split("\0") if p]


class NoArchiveHosts(unittest.TestCase):
    def test_no_archive_host_name_in_tools_ci_or_docs(self):
        hosts = apt_hosts()
        doms = domains(hosts)
        name_re = re.compile(r"(?<![A-Za-z0-9.-])((?:[A-Za-z0-9-]+\.)*(?:" + "|".join(map(re.escape, sorted(doms))) + r"))(?![A-Za-z0-9-])") if doms else None
        found = []
        for f in tracked_files():
            try:
                text = f.read_text(errors="replace")
            except (OSError, IsADirectoryError):
                continue
            rel = f.relative_to(support.REPO)
            for n, line in enumerate(text.splitlines(), 1):
                for m in URL_RE.finditer(line):
                    host, path = m.group(1).lower(), m.group(2) or ""
                    if ARCHIVE_PATH_RE.match(path) and not host.endswith(RESERVED):
                        found.append(f"{rel}:{n}: an archive URL on {host}")
                if name_re:
                    for m in name_re.finditer(line):
                        found.append(f"{rel}:{n}: {m.group(1)} (a domain of this machine's apt sources)")
        self.assertEqual(found, [])

    def test_the_checker_sees_a_planted_host(self):
        # The same detection on a made-up apt configuration and line.
        import tempfile

        root = Path(tempfile.mkdtemp())
        (root / "etc/apt").mkdir(parents=True)
        # (Spelt in two parts, so that this file passes the check above.)
        (root / "etc/apt/sources.list").write_text("deb http:" + "//ftp.mirrors.sample/debian bookworm main\n")
        self.assertEqual(apt_hosts(root), {"ftp.mirrors.sample"})
        self.assertEqual(domains({"ftp.mirrors.sample"}), {"mirrors.sample"})
        m = URL_RE.search("see http:" + "//cdn.elsewhere.sample/debian-security/dists/")
        self.assertTrue(ARCHIVE_PATH_RE.match(m.group(2)))


if __name__ == "__main__":
    unittest.main()
