//! Each vCPU's exact TSC offset from KVM's debugfs, for kernels without the
//! KVM_VCPU_TSC_OFFSET attribute (before Linux 5.16): KVM shows
//! `vcpu->arch.tsc_offset` read-only in
//! `<debugfs>/kvm/<pid>-<vm fd>/vcpu<N>/tsc-offset` as a signed decimal
//! (arch/x86/kvm/debugfs.c), readable by root when debugfs is mounted.

use std::fs::File;
use std::io;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where debugfs is mounted, from a mount table in `/proc/self/mounts`
/// format; `None` when it is not mounted.
pub fn mount_point(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "debugfs").then(|| PathBuf::from(unescape_mount_path(dir)))
    })
}

/// The mount table escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let escaped = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                u8::try_from(v).ok()
            });
        match (b[i], escaped) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's debugfs mount point, if debugfs is mounted.
pub fn mounted() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|m| mount_point(&m))
}

/// The directory KVM gives the VM whose fd is `vm_fd`, created by the thread
/// `pid` (KVM uses the creating thread's id, not the process id).
pub fn vm_dir(debugfs: &Path, pid: u32, vm_fd: i32) -> PathBuf {
    debugfs.join("kvm").join(format!("{pid}-{vm_fd}"))
}

/// The `tsc-offset` file of vCPU `vcpu` in the VM directory `vm_dir`.
pub fn offset_file(vm_dir: &Path, vcpu: u32) -> PathBuf {
    vm_dir.join(format!("vcpu{vcpu}")).join("tsc-offset")
}

/// Parses a `tsc-offset` file's text: a signed decimal, as KVM prints
/// `vcpu->arch.tsc_offset` (a u64 used as a wrapping offset).
pub fn parse(text: &str) -> Option<u64> {
    let t = text.trim();
    t.parse::<i64>()
        .map(|v| v as u64)
        .or_else(|_| t.parse::<u64>())
        .ok()
}

/// One vCPU's `tsc-offset` file. It is opened afresh for every read: KVM
/// opens it non-seekable and prints the value when it is first read.
#[derive(Debug)]
pub struct OffsetFile {
    path: PathBuf,
}

impl OffsetFile {
    /// Opens vCPU `vcpu`'s file in `vm_dir` and reads it once, so that a file
    /// that exists but cannot be read or parsed is refused here.
    pub fn open(vm_dir: &Path, vcpu: u32) -> io::Result<OffsetFile> {
        let f = OffsetFile {
            path: offset_file(vm_dir, vcpu),
        };
        f.read()?;
        Ok(f)
    }

    /// The offset now.
    pub fn read(&self) -> io::Result<u64> {
        let mut buf = [0u8; 32];
        let mut file = File::open(&self.path)?;
        let mut n = 0;
        while n < buf.len() {
            match file.read(&mut buf[n..])? {
                0 => break,
                k => n += k,
            }
        }
        let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
        parse(text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {text:?} is not a signed decimal", self.path.display()),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_point_comes_from_the_mount_table() {
        let mounts = "sysfs /sys sysfs rw 0 0\n\
                      proc /proc proc rw 0 0\n\
                      debugfs /sys/kernel/debug debugfs rw,relatime 0 0\n";
        assert_eq!(
            mount_point(mounts),
            Some(PathBuf::from("/sys/kernel/debug"))
        );
        assert_eq!(mount_point("proc /proc proc rw 0 0\n"), None);
        assert_eq!(
            mount_point("none /mnt/my\\040debug debugfs rw 0 0\n"),
            Some(PathBuf::from("/mnt/my debug"))
        );
    }

    #[test]
    fn offsets_parse_as_kvm_prints_them() {
        assert_eq!(parse("-25765678163\n"), Some((-25_765_678_163i64) as u64));
        assert_eq!(parse("1073587468178\n"), Some(1_073_587_468_178));
        assert_eq!(parse("0"), Some(0));
        // A u64 above i64::MAX (some kernels print it unsigned).
        assert_eq!(parse("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse(""), None);
        assert_eq!(parse("0x10"), None);
    }

    /// A fake debugfs tree as KVM lays it out: the path is found from the pid
    /// and the VM fd, each vCPU's file is read again on every read.
    #[test]
    fn the_offset_file_is_found_from_pid_and_vm_fd_and_reread() {
        let root = std::env::temp_dir().join(format!("tsc-debugfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = vm_dir(&root, 4242, 7);
        assert_eq!(dir, root.join("kvm/4242-7"));
        for (vcpu, text) in [(0, "-123456789\n"), (1, "1071430237253\n")] {
            let p = offset_file(&dir, vcpu);
            assert_eq!(p, root.join(format!("kvm/4242-7/vcpu{vcpu}/tsc-offset")));
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, text).expect("write");
        }
        let f0 = OffsetFile::open(&dir, 0).expect("vcpu0");
        assert_eq!(f0.read().expect("read") as i64, -123_456_789);
        let f1 = OffsetFile::open(&dir, 1).expect("vcpu1");
        assert_eq!(f1.read().expect("read"), 1_071_430_237_253);
        // The value changes (as KVM's does after a write): read afresh.
        std::fs::write(offset_file(&dir, 0), "-5\n").expect("rewrite");
        assert_eq!(f0.read().expect("read") as i64, -5);
        // No such vCPU, another VM, garbage: refused at open.
        assert!(OffsetFile::open(&dir, 2).is_err());
        assert!(OffsetFile::open(&vm_dir(&root, 4242, 8), 0).is_err());
        std::fs::write(offset_file(&dir, 1), "garbage").expect("write");
        let e = OffsetFile::open(&dir, 1).expect_err("garbage");
        assert!(e.to_string().contains("not a signed decimal"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
