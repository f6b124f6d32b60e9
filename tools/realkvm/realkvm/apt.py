"""Debian's archive as this machine's apt configuration names it, and
private apt state for one suite.

The harness downloads kernels and kernel sources from Debian's archive
without changing the machine's apt configuration: a private sources.list
with private lists and cache per suite. Which archive: the one the machine
already uses. `Archive.from_apt(root)` reads `ROOT/etc/apt/sources.list`,
`ROOT/etc/apt/sources.list.d/*.list` (one-line format) and `*.sources`
(deb822) and picks

- the main archive: a `deb` entry with component main whose suite is a
  Debian suite (a codename or alias, optionally -updates/-backports) and
  not a -security one;
- the security archive: a `deb` entry whose suite ends in -security
  (or the old SUITE/updates);

preferring, among several, entries signed by Debian's archive keyring
(Signed-By naming debian-archive-keyring, or none, which means apt's
default keyring), then the order apt reads them in. `--mirror URL` and
`--security-mirror URL` win over what the configuration says. No host name
of any archive is written in this code: a machine whose apt has no Debian
archive needs `--mirror`.
"""

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import EX_HOST, Fail

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# Debian's codenames (Toy Story characters) of releases since 2000 and to come,
# and the aliases. A suite outside these, e.g. a third-party repository's
# "nodistro" or "stable-foo", is not taken for Debian's archive.
DEBIAN_CODENAMES = {
    "potato", "woody", "sarge", "etch", "lenny", "squeeze", "wheezy", "jessie", "stretch",
    "buster", "bullseye", "bookworm", "trixie", "forky", "duke",
    "sid", "experimental", "rc-buggy", "oldoldstable", "oldstable", "stable", "testing", "unstable",
}
SUITE_RE = re.compile(r"^([a-z-]+?)(-updates|-backports|-backports-sloppy|-proposed-updates|-security|/updates)?$")


@dataclass(frozen=True)
class Entry:
    types: tuple
    uris: tuple
    suites: tuple
    components: tuple
    signed_by: str
    origin: str  # the file it came from


def parse_one_line(text, origin=""):
    """Entries of a one-line-format file (`deb [opts] URI SUITE COMP...`)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        opts = {}
        m = re.match(r"^(\S+)\s+\[([^\]]*)\]\s+(.*)$", line)
        if m:
            typ, optstr, rest = m.groups()
            for o in optstr.split():
                k, _, v = o.partition("=")
                opts[k.lower()] = v
        else:
            typ, _, rest = line.partition(" ")
        words = rest.split()
        if len(words) < 2:
            continue
        out.append(Entry((typ,), (words[0],), (words[1],), tuple(words[2:]), opts.get("signed-by", ""), origin))
    return out


def parse_deb822(text, origin=""):
    """Entries of a deb822 `.sources` file (paragraphs of Field: value)."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in para.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
                continue
            k, sep, v = line.partition(":")
            if not sep:
                continue
            key = k.strip().lower()
            fields[key] = v.strip()
        if not fields or fields.get("enabled", "yes").lower() == "no":
            continue
        if "uris" not in fields or "suites" not in fields:
            continue
        out.append(
            Entry(
                tuple(fields.get("types", "deb").split()),
                tuple(fields["uris"].split()),
                tuple(fields["suites"].split()),
                tuple(fields.get("components", "").split()),
                fields.get("signed-by", ""),
                origin,
            )
        )
    return out


def read_entries(root="/"):
    """Every entry of the apt configuration under `root`, in apt's order."""
    etc = Path(root) / "etc/apt"
    entries = []
    main = etc / "sources.list"
    if main.is_file():
        entries += parse_one_line(main.read_text(errors="replace"), str(main))
    for f in sorted(glob.glob(str(etc / "sources.list.d" / "*"))):
        try:
            text = Path(f).read_text(errors="replace")
        except OSError:
            continue
        if f.endswith(".list"):
            entries += parse_one_line(text, f)
        elif f.endswith(".sources"):
            entries += parse_deb822(text, f)
    return entries


def debian_suite(suite):
    """(base, kind) of a Debian suite name such as bookworm-security, or None."""
    m = SUITE_RE.match(suite)
    if not m or m.group(1) not in DEBIAN_CODENAMES:
        return None
    return m.group(1), m.group(2) or ""


def _debian_signed(e):
    # No Signed-By: apt's default keyring, which on Debian holds Debian's keys.
    return not e.signed_by or "debian-archive" in e.signed_by


@dataclass(frozen=True)
class Archive:
    """Where Debian's packages come from."""

    mirror: str  # the main archive: URL of the directory holding dists/
    security: str  # the security archive's URL, "" when unknown
    source: str  # how it was found, for messages

    @classmethod
    def from_apt(cls, root="/", mirror="", security=""):
        """The archive of the apt configuration under `root`; `mirror` and
        `security`, when given, win. Raises Fail(EX_HOST) when no main archive
        can be found and none was given."""
        entries = [e for e in read_entries(root) if "deb" in e.types]
        main, sec = [], []
        for e in entries:
            kinds = [debian_suite(s) for s in e.suites]
            if any(k and k[1] in ("-security", "/updates") for k in kinds):
                sec.append(e)
            elif any(k for k in kinds) and "main" in e.components:
                main.append(e)

        def pick(cands):
            cands = sorted(cands, key=lambda e: not _debian_signed(e))  # stable: apt's order otherwise
            return (cands[0].uris[0].rstrip("/"), cands[0].origin) if cands else ("", "")

        found_main, main_from = pick(main)
        found_sec, sec_from = pick(sec)
        source = []
        if mirror:
            source.append("--mirror")
        elif found_main:
            source.append(main_from)
        if security:
            source.append("--security-mirror")
        elif found_sec:
            source.append(sec_from)
        m = (mirror or found_main).rstrip("/")
        if not m:
            raise Fail(
                EX_HOST,
                f"no Debian archive in the apt configuration under {root} "
                "(no deb entry of a Debian suite with component main): pass --mirror URL",
            )
        return cls(m, (security or found_sec).rstrip("/"), ", ".join(source))


def suite_sources(suite, archive, keyring=KEYRING):
    """The private sources.list of one suite: a release (bookworm, stable,
    ...) has its point-release updates in SUITE-updates and its security
    fixes in SUITE-security; sid, experimental and the backports suites are
    one suite each."""
    lines = [f"deb [signed-by={keyring}] {archive.mirror} {suite} main"]
    if not (suite in ("sid", "unstable", "experimental", "rc-buggy") or "-backports" in suite):
        lines.append(f"deb [signed-by={keyring}] {archive.mirror} {suite}-updates main")
        if archive.security:
            lines.append(f"deb [signed-by={keyring}] {archive.security} {suite}-security main")
    return "".join(x + "\n" for x in lines)


def backports_sources(codename, archive, keyring=KEYRING):
    """A deb822 file adding CODENAME-backports of the same archive."""
    return f"Types: deb\nURIs: {archive.mirror}\nSuites: {codename}-backports\nComponents: main\nSigned-By: {keyring}\n"


def has_suite(root, suite):
    """Whether the apt configuration under `root` has a deb entry of `suite`."""
    return any(suite in e.suites for e in read_entries(root) if "deb" in e.types)


class PrivateApt:
    """apt-get/apt-cache with only the files under `directory` (sources.list,
    lists, cache, an empty dpkg status) instead of the machine's
    configuration."""

    def __init__(self, directory):
        self.dir = Path(directory)

    def prepare(self, sources):
        for d in ("lists/partial", "cache/archives/partial"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        # An empty dpkg status: a kernel package installed on this machine must
        # not become the candidate for another suite.
        status = self.dir / "status"
        if not status.exists():
            status.write_text("")
        (self.dir / "sources.list").write_text(sources)

    def opts(self):
        d = self.dir
        # APT::Sandbox::User=root: apt would drop to the _apt user for downloads,
        # which cannot write into a cache under root's 0700 home.
        return [
            "-o", f"Dir::Etc::SourceList={d}/sources.list", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={d}/lists", "-o", f"Dir::Cache={d}/cache",
            "-o", f"Dir::State::status={d}/status",
            "-o", "Dir::Etc::Preferences=/dev/null", "-o", "Dir::Etc::PreferencesParts=/dev/null",
            "-o", "APT::Architectures=amd64", "-o", "Acquire::Languages=none", "-o", "APT::Sandbox::User=root",
        ]

    def has_lists(self, suite):
        return bool(glob.glob(str(self.dir / "lists" / f"*_dists_{suite}_main_binary-amd64_Packages*")))


def env():
    e = dict(os.environ)
    e["DEBIAN_FRONTEND"] = "noninteractive"
    return e
