//! Where a file option writes: the file it names, or standard output when it
//! is `-` (every file option of every command takes `-`; a file really named
//! `-` is `./-`). [`OutputTarget::create`] opens it before anything is
//! measured, so an unwritable path fails at once; [`Sink`] is what is then
//! written to; [`OutputTarget::create_atomic`] is for readers that must never
//! see half a file (node_exporter's textfile collector): a temporary file in
//! the same directory, renamed over the target when complete.

use std::fmt;
use std::fs::File;
use std::io::{self, Stdout, Write};
use std::path::{Path, PathBuf};

/// A file option's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputTarget {
    /// `-`: standard output.
    Stdout,
    /// A file, created or truncated.
    File(PathBuf),
}

impl OutputTarget {
    /// Parses an option's value (clap's value parser): `-` is standard
    /// output, anything else but the empty string a path.
    pub fn parse(s: &str) -> Result<OutputTarget, String> {
        match s {
            "" => Err("an empty path: give a file name, or - for standard output".into()),
            "-" => Ok(OutputTarget::Stdout),
            path => Ok(OutputTarget::File(PathBuf::from(path))),
        }
    }

    /// Whether this is standard output.
    pub fn is_stdout(&self) -> bool {
        *self == OutputTarget::Stdout
    }

    /// The file's path; `None` for standard output.
    pub fn path(&self) -> Option<&Path> {
        match self {
            OutputTarget::Stdout => None,
            OutputTarget::File(p) => Some(p),
        }
    }

    /// Opens it for writing: creates (truncates) the file.
    pub fn create(&self) -> io::Result<Sink> {
        Ok(match self {
            OutputTarget::Stdout => Sink::Stdout(io::stdout()),
            OutputTarget::File(p) => Sink::File(File::create(p)?),
        })
    }

    /// Opens it for a complete replacement: a temporary file beside the
    /// target (same directory, so the rename is atomic), which
    /// [`Atomic::commit`] renames over it; dropped uncommitted, it is
    /// removed and the target is untouched.
    pub fn create_atomic(&self) -> io::Result<Atomic> {
        let OutputTarget::File(path) = self else {
            return Ok(Atomic {
                sink: Sink::Stdout(io::stdout()),
                rename: None,
            });
        };
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{}.tmp", std::process::id()));
        let temp = path.with_file_name(temp_name);
        Ok(Atomic {
            sink: Sink::File(File::create(&temp)?),
            rename: Some((temp, path.clone())),
        })
    }
}

impl fmt::Display for OutputTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputTarget::Stdout => f.write_str("standard output"),
            OutputTarget::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// An opened [`OutputTarget`].
#[derive(Debug)]
pub enum Sink {
    /// Standard output.
    Stdout(Stdout),
    /// A file.
    File(File),
}

impl Sink {
    /// Writes all of `text` and flushes: the one way a whole document is
    /// written to a target.
    pub fn write_text(&mut self, text: &str) -> io::Result<()> {
        self.write_all(text.as_bytes())?;
        self.flush()
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Stdout(s) => s.write(buf),
            Sink::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stdout(s) => s.flush(),
            Sink::File(f) => f.flush(),
        }
    }
}

/// A target replaced atomically (see [`OutputTarget::create_atomic`]).
#[derive(Debug)]
pub struct Atomic {
    sink: Sink,
    /// (temporary file, target); `None` for standard output.
    rename: Option<(PathBuf, PathBuf)>,
}

impl Atomic {
    /// Writes `text`, syncs it and renames the temporary file over the
    /// target.
    pub fn commit(mut self, text: &str) -> io::Result<()> {
        self.sink.write_text(text)?;
        if let Sink::File(f) = &self.sink {
            f.sync_all()?;
        }
        match self.rename.take() {
            Some((temp, target)) => std::fs::rename(&temp, target).inspect_err(|_| {
                let _ = std::fs::remove_file(&temp);
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Atomic {
    fn drop(&mut self) {
        if let Some((temp, _)) = self.rename.take() {
            let _ = std::fs::remove_file(temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tsc-target-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    }

    #[test]
    fn a_dash_is_stdout_and_anything_else_a_path() {
        assert_eq!(OutputTarget::parse("-"), Ok(OutputTarget::Stdout));
        assert_eq!(
            OutputTarget::parse("./-"),
            Ok(OutputTarget::File(PathBuf::from("./-")))
        );
        let e = OutputTarget::parse("").expect_err("empty");
        assert!(e.contains("- for standard output"), "{e}");
        assert_eq!(OutputTarget::Stdout.to_string(), "standard output");
        assert!(OutputTarget::Stdout.path().is_none());
    }

    #[test]
    fn a_file_is_created_and_written() {
        let dir = scratch("plain");
        let t = OutputTarget::File(dir.join("out.txt"));
        t.create()
            .and_then(|mut s| s.write_text("hello\n"))
            .expect("written");
        assert_eq!(
            std::fs::read_to_string(dir.join("out.txt")).ok().as_deref(),
            Some("hello\n")
        );
        let bad = OutputTarget::File(dir.join("no/such/dir/x"));
        assert!(bad.create().is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_atomic_file_appears_whole_or_not_at_all() {
        let dir = scratch("atomic");
        let target = dir.join("m.prom");
        std::fs::write(&target, "old\n").expect("an old file");
        let t = OutputTarget::File(target.clone());
        // Dropped uncommitted: the old file stays, no temporary file left.
        drop(t.create_atomic().expect("opened"));
        let entries = || std::fs::read_dir(&dir).map_or(0, |d| d.count());
        assert_eq!(entries(), 1);
        assert_eq!(
            std::fs::read_to_string(&target).ok().as_deref(),
            Some("old\n")
        );
        let a = t.create_atomic().expect("opened");
        // Until the commit, the reader sees the old file.
        assert_eq!(
            std::fs::read_to_string(&target).ok().as_deref(),
            Some("old\n")
        );
        a.commit("new\n").expect("committed");
        assert_eq!(
            std::fs::read_to_string(&target).ok().as_deref(),
            Some("new\n")
        );
        assert_eq!(entries(), 1, "the temporary file was renamed");
        let bad = OutputTarget::File(dir.join("no/such/dir/x"));
        assert!(bad.create_atomic().is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
