"""Tests of realkvm/machines/bochs.py: the files it writes (ISO tree,
isolinux.cfg, bochsrc), the command line, and boot() against a stand-in for
Bochs (a small Python script) for the streaming, power-off, timeout and
signal paths. Offline; no Bochs needed.

REALKVM_BOCHS_BOOT=1 adds one real boot under Bochs (needs the packages of
`BochsMachine.packages()`, busybox-static and a kernel: REALKVM_BOCHS_KERNEL,
default /tmp/bochs-lab/kernels/trixie/vmlinuz).

    python3 -m unittest discover -s tools/realkvm/tests -p 'test_bochs.py'
"""

import gzip
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

PKG_ROOT = Path(__file__).resolve().parent.parent  # tools/realkvm
if str(PKG_ROOT) not in sys.path:
    sys.path.insert(0, str(PKG_ROOT))

from realkvm.machines import base, bochs  # noqa: E402

# A stand-in for `bochs -q -f BOCHSRC -rc RC`: reads the com1 and log paths from
# the bochsrc and behaves as STUB_MODE says.
STUB = textwrap.dedent(
    r'''
    import os, re, signal, sys, time
    args = sys.argv[1:]
    rc = open(args[args.index("-f") + 1]).read()
    serial = re.search(r'^com1: .*dev="([^"]+)"', rc, re.M).group(1)
    log = re.search(r'^log: "([^"]+)"', rc, re.M).group(1)
    mode = os.environ.get("STUB_MODE", "poweroff")
    if os.environ.get("STUB_PIDFILE"):
        open(os.environ["STUB_PIDFILE"], "w").write(str(os.getpid()))
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        # Bochs' debugger: Ctrl-C stops the CPU, the prompt reads EOF, Bochs quits.
        def ctrl_c(*_):
            print("<bochs:1> fgets() returned ERROR.")
            print("(0).[5053197801] [0x00001c200be0] 0010:ffffffff9f400be0 (unk. ctxt): hlt ; f4", flush=True)
            os._exit(1)
        signal.signal(signal.SIGINT, ctrl_c)
    with open(serial, "ab", buffering=0) as s:
        s.write(b"line one\r\n")
        time.sleep(0.3)
        s.write(b"line two\n@@TSC-QEMU-EXIT 0@@\n")
        if mode == "poweroff":
            s.write(b"no newline at the end")
            open(log, "w").write("00008965798962p[ACPI  ] >>PANIC<< ACPI control: soft power off\n")
            sys.exit(1)
        if mode == "exit3":
            sys.exit(3)
        if mode == "panic":
            open(log, "w").write("00000000001p[CPU0  ] >>PANIC<< something broke\n")
            sys.exit(1)
        while True:
            time.sleep(0.1)
    '''
)


def spec(**kw):
    d = dict(name="bochs-tigerlake", emulator="bochs", vendor="vmx", kvm_module="kvm_intel", cpu="tigerlake", max_cpus=1, options={})
    d.update(kw)
    return base.MachineSpec(**d)


class Tmp(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="test-bochs."))
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.kernel = self.tmp / "vmlinuz"
        self.kernel.write_bytes(b"K" * 1000)
        self.initrd = self.tmp / "initrd.gz"
        self.initrd.write_bytes(gzip.compress(b"cpio"))

    def boot_of(self, cmdline="quiet panic=-1", cpus=1, timeout=30, mem=1024):
        work = self.tmp / "work"
        return base.Boot(self.kernel, self.initrd, cmdline, cpus, mem, timeout, work, work / "serial.log")

    def stub_machine(self, mode, **options):
        stub = self.tmp / "fake-bochs"
        stub.write_text(f"#!{sys.executable}\n" + STUB)
        stub.chmod(0o755)
        m = bochs.MACHINE_CLASS(spec(options={"bochs": str(stub), "stop_grace_s": 0.5, "netns": False, **options}))
        # No xorriso or isolinux needed: the ISO step is replaced by a file.
        m.build_iso = lambda boot: (boot.workdir / "boot.iso").write_bytes(b"iso") or boot.workdir / "boot.iso"
        os.environ["STUB_MODE"] = mode
        self.addCleanup(os.environ.pop, "STUB_MODE", None)
        return m


class Interface(Tmp):
    def test_machine_class(self):
        self.assertTrue(issubclass(bochs.MACHINE_CLASS, base.Machine))
        m = bochs.MACHINE_CLASS(spec())
        for p in ("bochs", "bochsbios", "vgabios", "isolinux", "syslinux-common", "xorriso"):
            self.assertIn(p, m.packages())
        self.assertGreater(m.power_off_delay_s, 0)

    def test_cmdline(self):
        words = bochs.MACHINE_CLASS(spec()).cmdline().split()
        self.assertIn("console=ttyS0,115200", words)
        self.assertIn("tsc=reliable", words)

    def test_power_off_delay(self):
        # tigerlake publishes 2419.2 MHz: at ips 4M the UART drains 605x faster
        # than guest time passes; haswell calibrates, so guest = device time.
        self.assertEqual(bochs.MACHINE_CLASS(spec()).power_off_delay_s, 0.05)
        self.assertEqual(bochs.MACHINE_CLASS(spec(options={"ips": 2419200000})).power_off_delay_s, 0.71)
        self.assertEqual(bochs.MACHINE_CLASS(spec(cpu="corei7_haswell_4770")).power_off_delay_s, 0.71)
        self.assertEqual(bochs.MACHINE_CLASS(spec(cpu="corei7_haswell_4770", options={"ips": 4000000})).power_off_delay_s, 0.71)

    def test_default_ips(self):
        # CPUID fixes tsc_khz on these: Bochs' default; calibrated models: 2.4192 GHz.
        self.assertEqual(bochs.MACHINE_CLASS(spec(cpu="tigerlake")).ips, 4000000)
        self.assertEqual(bochs.MACHINE_CLASS(spec(cpu="corei7_skylake_x")).ips, 4000000)
        self.assertEqual(bochs.MACHINE_CLASS(spec(cpu="corei7_haswell_4770")).ips, 2419200000)
        self.assertEqual(bochs.MACHINE_CLASS(spec(cpu="corei7_haswell_4770", options={"ips": 5})).ips, 5)
        self.assertEqual(bochs.MACHINE_CLASS(spec(options={"power_off_delay_s": 3})).power_off_delay_s, 3.0)

    def test_accepts(self):
        m = bochs.MACHINE_CLASS(spec(max_cpus=2))
        self.assertEqual(m.accepts(1), (True, ""))
        self.assertEqual(m.accepts(2), (True, ""))
        ok, why = m.accepts(3)
        self.assertFalse(ok)
        self.assertIn("at most 2", why)
        self.assertFalse(m.accepts(0)[0])

    def test_options(self):
        m = bochs.MACHINE_CLASS(spec(options={"ips": "2419200000"}))
        self.assertEqual(m.ips, 2419200000)
        for bad in ({"ips": 0}, {"ips": "fast"}, {"ips": 1 << 32}, {"bochsrc_extra": ["a\nb"]}):
            with self.assertRaises(ValueError, msg=bad):
                bochs.MACHINE_CLASS(spec(options=bad))

    def test_full_cmdline_adds_only_what_is_missing(self):
        m = bochs.MACHINE_CLASS(spec())
        self.assertEqual(m.full_cmdline(self.boot_of("quiet")), "quiet console=ttyS0,115200 tsc=reliable")
        # The harness may have joined the machine's part already: not twice.
        line = m.full_cmdline(self.boot_of("console=ttyS0,115200 tsc=reliable quiet"))
        self.assertEqual(line.split().count("tsc=reliable"), 1)
        self.assertEqual(line.count("console="), 1)
        self.assertEqual(m.full_cmdline(self.boot_of("a\nb")), "a b console=ttyS0,115200 tsc=reliable")
        # Two or more emulated CPUs: no MWAIT idle (kvm_intel's load hung with it).
        self.assertNotIn("idle=nomwait", m.full_cmdline(self.boot_of("quiet", cpus=1)))
        self.assertIn("idle=nomwait", m.full_cmdline(self.boot_of("quiet", cpus=2)).split())
        self.assertEqual(m.full_cmdline(self.boot_of("idle=halt", cpus=2)).split().count("idle=halt"), 1)
        self.assertNotIn("idle=nomwait", m.full_cmdline(self.boot_of("idle=halt", cpus=2)))
        with self.assertRaises(ValueError):
            m.full_cmdline(self.boot_of("x" * 2001))


class Files(Tmp):
    def test_isolinux_cfg(self):
        cfg = bochs.MACHINE_CLASS(spec()).isolinux_cfg("console=ttyS0,115200 quiet")
        lines = [ln.strip() for ln in cfg.splitlines()]
        for want in ("DEFAULT linux", "PROMPT 0", "TIMEOUT 0", "LABEL linux", "KERNEL /vmlinuz", "INITRD /initrd.gz", "APPEND console=ttyS0,115200 quiet"):
            self.assertIn(want, lines)

    def test_iso_tree(self):
        m = bochs.MACHINE_CLASS(spec())
        tree = m.iso_tree(self.boot_of())
        self.assertEqual(
            sorted(tree), ["initrd.gz", "isolinux/isolinux.bin", "isolinux/isolinux.cfg", "isolinux/ldlinux.c32", "vmlinuz"]
        )
        self.assertEqual(tree["vmlinuz"], self.kernel)
        self.assertEqual(tree["initrd.gz"], self.initrd)
        self.assertIn("APPEND quiet panic=-1 console=ttyS0,115200 tsc=reliable", tree["isolinux/isolinux.cfg"])

    def test_xorriso_command(self):
        cmd = bochs.MACHINE_CLASS(spec()).xorriso_command(Path("/t"), Path("/o.iso"))
        self.assertEqual(cmd[:3], ["xorriso", "-as", "mkisofs"])
        for a, b in (("-o", "/o.iso"), ("-b", "isolinux/isolinux.bin"), ("-c", "isolinux/boot.cat"), ("-boot-load-size", "4")):
            self.assertEqual(cmd[cmd.index(a) + 1], b)
        self.assertIn("-no-emul-boot", cmd)
        self.assertIn("-boot-info-table", cmd)
        self.assertEqual(cmd[-1], "/t")

    def test_build_iso_lays_out_the_tree(self):
        m = bochs.MACHINE_CLASS(spec())
        fake = self.tmp / "syslinux"
        fake.mkdir()
        (fake / "isolinux.bin").write_bytes(b"ISOLINUX")
        (fake / "ldlinux.c32").write_bytes(b"LDLINUX")
        tree = m.iso_tree
        m.iso_tree = lambda boot: {**tree(boot), "isolinux/isolinux.bin": fake / "isolinux.bin", "isolinux/ldlinux.c32": fake / "ldlinux.c32"}
        seen = {}

        def fake_xorriso(tree_dir, iso):
            # Records the tree the real xorriso would get; "writes" the ISO.
            script = (
                "import os, sys, json\n"
                "t, iso = sys.argv[1], sys.argv[2]\n"
                "files = {os.path.relpath(os.path.join(d, f), t): open(os.path.join(d, f), 'rb').read().decode('latin-1')"
                " for d, _, fs in os.walk(t) for f in fs}\n"
                "open(iso, 'w').write(json.dumps(files))\n"
            )
            return [sys.executable, "-c", script, str(tree_dir), str(iso)]

        m.xorriso_command = fake_xorriso
        boot = self.boot_of()
        boot.workdir.mkdir()
        iso = m.build_iso(boot)
        import json

        seen = json.loads(iso.read_text())
        self.assertEqual(iso, boot.workdir / "boot.iso")
        self.assertEqual(seen["vmlinuz"], "K" * 1000)
        self.assertEqual(seen["isolinux/isolinux.bin"], "ISOLINUX")
        self.assertEqual(seen["isolinux/ldlinux.c32"], "LDLINUX")
        self.assertIn("INITRD /initrd.gz", seen["isolinux/isolinux.cfg"])
        self.assertFalse((boot.workdir / "iso").exists(), "the staging tree is removed")

    def test_build_iso_missing_syslinux_file(self):
        m = bochs.MACHINE_CLASS(spec())
        tree = m.iso_tree
        m.iso_tree = lambda boot: {**tree(boot), "isolinux/isolinux.bin": self.tmp / "nope"}
        boot = self.boot_of()
        boot.workdir.mkdir()
        with self.assertRaises(FileNotFoundError) as cm:
            m.build_iso(boot)
        self.assertIn("isolinux", str(cm.exception))

    def test_boot_reports_a_missing_isolinux(self):
        m = bochs.MACHINE_CLASS(spec(options={"netns": False}))
        tree = m.iso_tree
        m.iso_tree = lambda boot: {**tree(boot), "isolinux/isolinux.bin": self.tmp / "nope"}
        with self.assertRaises(Exception) as cm:
            m.boot(self.boot_of())
        self.assertIn("preparing the boot failed", str(getattr(cm.exception, "message", cm.exception)))
        self.assertIn("nope", str(getattr(cm.exception, "message", cm.exception)))

    @unittest.skipUnless(shutil.which("xorriso") and Path(bochs.ISOLINUX_BIN).is_file() and Path(bochs.LDLINUX_C32).is_file(), "xorriso/isolinux not installed")
    def test_build_iso_real_xorriso(self):
        m = bochs.MACHINE_CLASS(spec())
        boot = self.boot_of()
        boot.workdir.mkdir()
        iso = m.build_iso(boot)
        data = iso.read_bytes()
        self.assertEqual(data[0x8001:0x8006], b"CD001")  # ISO 9660 primary volume descriptor
        self.assertIn(b"EL TORITO SPECIFICATION", data[0x8801:0x8900])  # the boot record

    def test_bochsrc(self):
        m = bochs.MACHINE_CLASS(spec(cpu="corei7_skylake_x", options={"ips": 50000000, "bochsrc_extra": ["port_e9_hack: enabled=1"]}))
        boot = self.boot_of(cpus=2, mem=768)
        rc = m.bochsrc(boot, boot.workdir / "boot.iso")
        lines = rc.splitlines()
        for want in (
            "cpu: model=corei7_skylake_x, count=2, ips=50000000, reset_on_triple_fault=0",
            "memory: guest=768, host=768",
            f'ata0-master: type=cdrom, path="{boot.workdir / "boot.iso"}", status=inserted',
            "boot: cdrom",
            f'com1: enabled=1, mode=file, dev="{boot.serial_log}"',
            "clock: sync=none, time0=local",
            'display_library: rfb, options="timeout=0"',
            "speaker: enabled=0",
            "sound: waveoutdrv=dummy, waveindrv=dummy, midioutdrv=dummy",
            "panic: action=fatal",
            f'log: "{boot.workdir / "bochs.log"}"',
            f'romimage: file="{bochs.BIOS}"',
            "port_e9_hack: enabled=1",
        ):
            self.assertIn(want, lines)
        self.assertFalse(any(ln.startswith("display_library: nogui") for ln in lines))

    def test_bochsrc_refuses_quotes_in_paths(self):
        m = bochs.MACHINE_CLASS(spec())
        boot = self.boot_of()
        with self.assertRaises(ValueError):
            m.bochsrc(boot, Path('/tmp/a"b.iso'))

    def test_command(self):
        m = bochs.MACHINE_CLASS(spec())
        boot = self.boot_of()
        # By default in a network namespace of its own (the RFB display's port).
        self.assertEqual(m.command(boot)[:3], ["unshare", "--net", "--"])
        cmd = bochs.MACHINE_CLASS(spec(options={"netns": "false"})).command(boot)
        self.assertEqual(cmd[0], "bochs")
        self.assertIn("-q", cmd)
        self.assertEqual(cmd[cmd.index("-f") + 1], str(boot.workdir / "bochsrc"))
        self.assertEqual(cmd[cmd.index("-rc") + 1], str(boot.workdir / "debugger.rc"))


class BootWithStub(Tmp):
    def test_power_off_streams_lines_and_is_status_0(self):
        m = self.stub_machine("poweroff")
        got = []
        boot = self.boot_of()
        r = m.boot(boot, got.append)
        self.assertEqual(got, ["line one\r\n", "line two\n", "@@TSC-QEMU-EXIT 0@@\n", "no newline at the end"])
        self.assertEqual(r.exit_status, 0)
        self.assertFalse(r.timed_out)
        self.assertIn("bochs_exit_status=1", r.notes)
        self.assertIn("bochs_power_off=acpi", r.notes)
        self.assertTrue(r.emulator_version.startswith("Bochs"))
        self.assertEqual(boot.serial_log.read_bytes(), b"line one\r\nline two\n@@TSC-QEMU-EXIT 0@@\nno newline at the end")
        self.assertEqual((boot.workdir / "debugger.rc").read_text(), "c\n")
        self.assertIn("boot: cdrom", (boot.workdir / "bochsrc").read_text())

    def test_other_exit_status_is_kept(self):
        r = self.stub_machine("exit3").boot(self.boot_of())
        self.assertEqual(r.exit_status, 3)
        self.assertIn("bochs_power_off=no", r.notes)

    def test_other_panic_is_noted(self):
        r = self.stub_machine("panic").boot(self.boot_of())
        self.assertEqual(r.exit_status, 1)
        self.assertIn("bochs_panic=something broke", r.notes)

    def test_timeout_stops_bochs(self):
        pidfile = self.tmp / "pid"
        os.environ["STUB_PIDFILE"] = str(pidfile)
        self.addCleanup(os.environ.pop, "STUB_PIDFILE", None)
        m = self.stub_machine("hang")
        got = []
        t0 = time.monotonic()
        r = m.boot(self.boot_of(timeout=2), got.append)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.exit_status, 124)
        self.assertIn("@@TSC-QEMU-EXIT 0@@\n", got)
        # Stopped by SIGINT, as Bochs' debugger quits on it; where the CPU was is noted.
        self.assertIn("bochs_exit_status=1", r.notes)
        self.assertIn("bochs_stopped_at=0010:ffffffff9f400be0 phys 0x00001c200be0 tick 5053197801: hlt", r.notes)
        self.assertFalse(alive(int(pidfile.read_text())))

    def test_timeout_kills_bochs_that_ignores_sigterm(self):
        pidfile = self.tmp / "pid"
        os.environ["STUB_PIDFILE"] = str(pidfile)
        self.addCleanup(os.environ.pop, "STUB_PIDFILE", None)
        m = self.stub_machine("ignore-term")
        r = m.boot(self.boot_of(timeout=1))
        self.assertTrue(r.timed_out)
        self.assertIn("bochs_exit_status=-9", r.notes)
        self.assertFalse(alive(int(pidfile.read_text())))

    def test_exception_in_the_harness_stops_bochs(self):
        # What a Ctrl-C (KeyboardInterrupt) or the harness's SIGTERM handler
        # (an exception) does while boot() runs.
        pidfile = self.tmp / "pid"
        os.environ["STUB_PIDFILE"] = str(pidfile)
        self.addCleanup(os.environ.pop, "STUB_PIDFILE", None)
        m = self.stub_machine("hang")

        def out(line):
            if "line two" in line:
                raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            m.boot(self.boot_of(timeout=60), out)
        self.assertFalse(alive(int(pidfile.read_text())))

    def test_sigterm_without_a_handler_stops_bochs_then_the_process(self):
        pidfile = self.tmp / "pid"
        stub = self.stub_machine("hang")  # writes the stub
        code = textwrap.dedent(
            f"""
            import sys, os
            sys.path.insert(0, {str(PKG_ROOT)!r})
            from pathlib import Path
            from realkvm.machines import base, bochs
            spec = base.MachineSpec(name="b", emulator="bochs", vendor="vmx", kvm_module="kvm_intel", cpu="tigerlake",
                                    options={{"bochs": {stub.binary!r}, "stop_grace_s": 0.5, "netns": False}})
            m = bochs.MACHINE_CLASS(spec)
            m.build_iso = lambda boot: (boot.workdir / "boot.iso").write_bytes(b"iso") or boot.workdir / "boot.iso"
            w = Path({str(self.tmp / "w2")!r})
            b = base.Boot(Path({str(self.kernel)!r}), Path({str(self.initrd)!r}), "", 1, 1024, 60, w, w / "serial.log")
            m.boot(b, lambda line: print(line, end="", flush=True))
            print("NOT REACHED")
            """
        )
        env = dict(os.environ, STUB_MODE="hang", STUB_PIDFILE=str(pidfile))
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        self.assertEqual(p.stdout.readline(), "line one\n")  # Bochs runs; boot() is following it
        p.send_signal(signal.SIGTERM)
        rest = p.stdout.read()
        p.stdout.close()
        self.assertEqual(p.wait(20), -signal.SIGTERM)
        self.assertNotIn("NOT REACHED", rest)
        self.assertFalse(alive(int(pidfile.read_text())))


def alive(pid):
    """Whether process pid exists and is not a zombie."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True


def newc(entries):
    """A cpio newc archive of [(path, mode, data)] (data None for a directory)."""
    out = b""
    for i, (path, mode, data) in enumerate(entries + [("TRAILER!!!", 0, b"")]):
        name = path.encode() + b"\0"
        data = data or b""
        fields = [i + 1, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name), 0]
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        out += hdr + name + b"\0" * (-(len(hdr) + len(name)) % 4) + data + b"\0" * (-len(data) % 4)
    return out


@unittest.skipUnless(os.environ.get("REALKVM_BOCHS_BOOT") == "1", "set REALKVM_BOCHS_BOOT=1 to boot under Bochs")
class RealBoot(Tmp):
    def test_boot_and_power_off(self):
        kernel = Path(os.environ.get("REALKVM_BOCHS_KERNEL", "/tmp/bochs-lab/kernels/trixie/vmlinuz"))
        busybox = shutil.which("busybox")
        self.assertTrue(kernel.is_file(), f"no kernel at {kernel}")
        self.assertTrue(busybox, "busybox-static is needed")
        m = bochs.MACHINE_CLASS(spec(cpu=os.environ.get("REALKVM_BOCHS_CPU", "tigerlake")))
        # "#!/bin/sh" with /bin/sh a symlink to busybox, as the harness's /init.
        init = (
            "#!/bin/sh\nexport PATH=/bin\nmount -t proc proc /proc\n"
            'echo "@@TSC-QEMU-BEGIN@@"\necho "hello from $(uname -r)"\necho "@@TSC-QEMU-EXIT 0@@"\n'
            f"sleep {m.power_off_delay_s}\necho o >/proc/sysrq-trigger\nsleep 30\n"
        )
        links = [(f"bin/{a}", 0o120777, b"busybox") for a in ("sh", "mount", "echo", "uname", "sleep")]
        archive = newc([("bin", 0o40755, None), ("proc", 0o40755, None), ("dev", 0o40755, None),
                        ("bin/busybox", 0o100755, Path(busybox).read_bytes()), *links, ("init", 0o100755, init.encode())])
        self.initrd.write_bytes(gzip.compress(archive, 1))
        boot = base.Boot(kernel, self.initrd, "quiet panic=-1", 1, 512, 900, self.tmp / "work", self.tmp / "work" / "serial.log")
        lines = []
        r = m.boot(boot, lines.append)
        text = "".join(lines)
        self.assertFalse(r.timed_out, text[-2000:])
        self.assertIn("@@TSC-QEMU-EXIT 0@@", text)
        self.assertIn("hello from ", text)
        self.assertEqual(r.exit_status, 0, r.notes)
        self.assertIn("bochs_power_off=acpi", r.notes)


if __name__ == "__main__":
    unittest.main()
