"""The serial protocol between the guest's /init and the host.

The guest's /init prints marker lines on its console; the host finds them in
the serial log. The names are the ones run-in-qemu.sh always used (scripts
and people grep for them), whatever the machine:

    @@TSC-QEMU-KERNEL <uname -r>@@        after the modules loaded
    @@TSC-QEMU-UPTIME start <s>@@         the guest kernel's uptime at the start
    @@TSC-QEMU-BEGIN@@                    the program's output follows
    @@TSC-QEMU-EXIT <code>@@              the program's exit code (glued to its
                                          last line when that had no newline)
    @@TSC-QEMU-SETUP-FAIL <why>@@         a module did not load, no /dev/kvm
    @@TSC-QEMU-FILE <md5> <path>@@        a file of $TSC_QEMU_OUT follows,
    <gzip, base64 lines>                  gzip'd and base64-encoded,
    @@TSC-QEMU-FILE-END@@                 up to here
    @@TSC-QEMU-FILES-DONE@@               every file was sent
    @@TSC-QEMU-DMESG@@                    (--dmesg) the kernel log follows
    @@TSC-QEMU-UPTIME end <s>@@           just before power-off
"""

import base64
import binascii
import gzip
import hashlib
import os
import re
from dataclasses import dataclass, field

BEGIN = "@@TSC-QEMU-BEGIN@@"
EXIT_RE = re.compile(r"@@TSC-QEMU-EXIT ([0-9]+)@@")
FAIL_RE = re.compile(r"@@TSC-QEMU-SETUP-FAIL ([^@]*)@@")
KERNEL_RE = re.compile(r"@@TSC-QEMU-KERNEL ([^@]*)@@")
UPTIME_RE = re.compile(r"@@TSC-QEMU-UPTIME (start|end) ([0-9.]+)@@")
FILE_RE = re.compile(r"^@@TSC-QEMU-FILE ([0-9a-f]+) (.*)@@$")
FILE_END = "@@TSC-QEMU-FILE-END@@"
FILES_DONE = "@@TSC-QEMU-FILES-DONE@@"
DMESG = "@@TSC-QEMU-DMESG@@"
# A kernel message on the console ("[   12.345678] ...").
KMSG_RE = re.compile(r"^\[ *[0-9]+\.[0-9]+\] ")
EXIT_AT_END_RE = re.compile(rb"@@TSC-QEMU-EXIT [0-9]+@@\r?$")
B64_RE = re.compile(r"^[A-Za-z0-9+/=]+$")


@dataclass
class Returned:
    path: str  # relative to $TSC_QEMU_OUT
    md5: str
    data: bytes = None  # None: incomplete or damaged
    why: str = ""


@dataclass
class Log:
    """What a serial log says."""

    exit_code: int = None  # None: no exit marker
    setup_fail: str = None
    kernel: str = None
    uptime_start: str = ""
    uptime_end: str = ""
    began: bool = False
    files_done: bool = False
    output: bytes = b""  # the program's own output
    files: list = field(default_factory=list)  # [Returned]


def _text(line):
    return line.decode("utf-8", "replace")


def parse(raw):
    """Parses the bytes of a serial log."""
    log = Log()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    # The last of each marker counts (as in the bash version's `tail -n 1`).
    for line in lines:
        t = _text(line)
        for m in EXIT_RE.finditer(t):
            log.exit_code = int(m.group(1))
        for m in FAIL_RE.finditer(t):
            log.setup_fail = m.group(1)
        for m in KERNEL_RE.finditer(t):
            log.kernel = m.group(1)
        for m in UPTIME_RE.finditer(t):
            if m.group(1) == "start":
                log.uptime_start = m.group(2)
            else:
                log.uptime_end = m.group(2)
        if t.rstrip("\r") == FILES_DONE:
            log.files_done = True
        if BEGIN in t:
            log.began = True
    log.output = program_output(lines)
    log.files = returned_files(lines)
    return log


def program_output(lines):
    """Everything after the begin marker up to the exit marker, minus lines
    that look like kernel messages. When the program's last line had no
    newline the exit marker is glued to it: that text is kept, without a
    newline."""
    out, on = [], False
    for line in lines:
        if not on:
            if line.rstrip(b"\r") == BEGIN.encode():
                on = True
            continue
        m = EXIT_AT_END_RE.search(line)
        if m:
            return b"".join(x + b"\n" for x in out) + line[: m.start()]
        if KMSG_RE.match(_text(line)):
            continue
        out.append(line)
    return b"".join(x + b"\n" for x in out)


def returned_files(lines):
    """The files between FILE and FILE-END markers, each kept only when its
    base64 decodes, its gzip unpacks and its md5 is the one announced."""
    files, cur, body = [], None, []
    for line in lines:
        t = _text(line).rstrip("\r")
        m = FILE_RE.match(t)
        if m:
            if cur is not None:
                files.append(_finish(cur, body, ended=False))
            cur, body = Returned(path=m.group(2), md5=m.group(1)), []
            continue
        if cur is None:
            continue
        if t == FILE_END:
            files.append(_finish(cur, body, ended=True))
            cur = None
        elif B64_RE.match(t):
            body.append(t)
    if cur is not None:
        files.append(_finish(cur, body, ended=False))
    return files


def _finish(f, body, ended):
    if not safe_relative(f.path):
        f.why = f"a bad name '{f.path}'"
        return f
    try:
        data = gzip.decompress(base64.b64decode("".join(body), validate=True))
    except (binascii.Error, OSError, EOFError, ValueError) as e:
        f.why = f"does not unpack ({e.__class__.__name__})" + ("" if ended else ", and its end marker is missing")
        return f
    if hashlib.md5(data).hexdigest() != f.md5:
        f.why = "its md5 differs"
        return f
    f.data = data
    return f


def safe_relative(path):
    return bool(path) and not path.startswith("/") and ".." not in path.split("/")


def hide_file_bodies():
    """A filter for the console copy: the base64 blocks of returned files are
    replaced by one line saying how many lines were left out. Call with each
    line; returns what to print (possibly "")."""
    state = {"hide": False, "n": 0}

    def filt(line):
        t = line.rstrip("\n").rstrip("\r")
        if FILE_RE.match(t):
            state["hide"], state["n"] = True, 0
            return line
        if state["hide"] and t == FILE_END:
            state["hide"] = False
            return f"({state['n']} lines of base64 not shown)\n"
        if state["hide"]:
            state["n"] += 1
            return ""
        return line

    return filt


def write_files(files, outdir, log):
    """Writes the complete ones under `outdir`; warns about the others.
    Returns how many were kept."""
    kept = 0
    for f in files:
        if f.data is None:
            if f.why.startswith("a bad name"):
                log(f"warning: ignoring returned file with {f.why}")
            else:
                log(f"warning: /out/{f.path} came back incomplete or damaged ({f.why}); not kept")
            continue
        dest = os.path.join(outdir, f.path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as out:
            out.write(f.data)
        kept += 1
    return kept
