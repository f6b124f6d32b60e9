//! `completions` and `man`: shell completions (`clap_complete`) and roff
//! man pages (`clap_mangen`) generated from the same `clap::Command` the
//! parser is built from, so they cannot drift from the options. The command
//! is handed in by the caller ([`super::dispatch`]), so this module does not
//! import the parser.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Command};
use clap_complete::Shell;
use clap_mangen::Man;

use super::common::{cannot_run, Exit};

/// Options of `completions`.
#[derive(Debug, Args, Clone)]
pub struct CompletionsArgs {
    /// The shell to complete for. Install e.g. bash's with
    /// `tsc-rendezvous completions bash > ~/.local/share/bash-completion/completions/tsc-rendezvous`.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Options of `man`.
#[derive(Debug, Args, Clone)]
pub struct ManArgs {
    /// The subcommand whose page to print (`check` prints
    /// tsc-rendezvous-check.1); the main page when omitted.
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,

    /// Write every page (tsc-rendezvous.1 and one tsc-rendezvous-COMMAND.1
    /// per subcommand) into this directory, created when missing, instead of
    /// printing one; prints the paths written.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub out_dir: Option<PathBuf>,
}

/// The completion script of `shell` for `cmd`.
pub fn completion(shell: Shell, mut cmd: Command) -> Vec<u8> {
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, name.as_str(), &mut out);
    match shell {
        Shell::Bash => fix_bash_states(&String::from_utf8_lossy(&out), &name).into_bytes(),
        _ => out,
    }
}

/// Works around clap_complete's bash generator for a name with a hyphen
/// (clap-rs/clap issue 6421, open in clap_complete 4.6): its loop names the
/// state of `tsc-rendezvous check` `tsc__rendezvous__subcmd__check` but the
/// `case` arm that completes it `tsc__subcmd__rendezvous__subcmd__check`, so
/// no subcommand's options would ever complete. The arms are renamed to the
/// loop's spelling; a generator without the bug leaves nothing to rename.
fn fix_bash_states(script: &str, name: &str) -> String {
    let right = format!("{}__subcmd__", name.replace('-', "__"));
    let wrong = format!("{}__subcmd__", name.replace('-', "__subcmd__"));
    if right == wrong {
        return script.to_string();
    }
    script
        .split_inclusive('\n')
        .map(|line| {
            let label = line.trim_start();
            if label.starts_with(&wrong) && label.trim_end().ends_with(')') {
                line.replacen(&wrong, &right, 1)
            } else {
                line.to_string()
            }
        })
        .collect()
}

/// Every man page of `cmd`: the main page first, then one per subcommand
/// (recursively, hidden ones and `help` left out), as `clap_mangen`'s
/// `generate_to` names and writes them.
pub fn man_pages(cmd: Command) -> Vec<Man> {
    fn add(cmd: Command, out: &mut Vec<Man>) {
        let subs: Vec<Command> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .cloned()
            .collect();
        out.push(Man::new(cmd));
        for sub in subs {
            add(sub, out);
        }
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    add(cmd, &mut out);
    out
}

/// The roff text of one page.
pub fn render(page: &Man) -> Result<Vec<u8>, std::io::Error> {
    let mut out = Vec::new();
    page.render(&mut out)?;
    Ok(out)
}

/// Writes `bytes` to standard output; a closed pipe or another write error
/// is a failure (exit code 1) with its reason.
fn print(bytes: &[u8]) -> Exit {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Exit::Done,
        Err(e) => {
            eprintln!("error: cannot write to standard output: {e}");
            Exit::Failed
        }
    }
}

/// Runs `completions` for `cmd`.
pub fn completions(args: &CompletionsArgs, cmd: Command) -> Exit {
    print(&completion(args.shell, cmd))
}

/// Runs `man` for `cmd`.
pub fn man(args: &ManArgs, cmd: Command) -> Exit {
    let pages = man_pages(cmd);
    if let Some(dir) = &args.out_dir {
        return write_pages(&pages, dir);
    }
    let page = match &args.command {
        None => pages.first(),
        Some(name) => pages
            .iter()
            .skip(1)
            .find(|p| subcommand_of(&pages, p).as_deref() == Some(name.as_str())),
    };
    let Some(page) = page else {
        let names: Vec<String> = pages
            .iter()
            .skip(1)
            .filter_map(|p| subcommand_of(&pages, p))
            .collect();
        return cannot_run(format_args!(
            "there is no subcommand '{}'; give one of: {}",
            args.command.as_deref().unwrap_or_default(),
            names.join(", ")
        ));
    };
    match render(page) {
        Ok(roff) => print(&roff),
        Err(e) => cannot_run(format_args!("cannot render the man page: {e}")),
    }
}

/// The subcommand a page documents, as `man` takes it: `check` for
/// tsc-rendezvous-check.1 (the main page, `pages[0]`, names the prefix).
fn subcommand_of(pages: &[Man], page: &Man) -> Option<String> {
    let main = pages.first()?.get_filename();
    let prefix = format!("{}-", main.strip_suffix(".1")?);
    let file = page.get_filename();
    let name = file.strip_suffix(".1")?.strip_prefix(&prefix)?;
    Some(name.to_string())
}

/// Writes every page into `dir` and prints each path.
fn write_pages(pages: &[Man], dir: &Path) -> Exit {
    let fail = |e: std::io::Error| {
        cannot_run(format_args!(
            "cannot write the man pages to {}: {e}; give a writable directory",
            dir.display()
        ))
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        return fail(e);
    }
    let mut written = String::new();
    for page in pages {
        match page.generate_to(dir) {
            Ok(path) => written.push_str(&format!("{}\n", path.display())),
            Err(e) => return fail(e),
        }
    }
    print(written.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bash_arms_are_renamed_to_the_loops_states_only() {
        let script = "            tsc-rendezvous,check)\n                cmd=\"tsc__rendezvous__subcmd__check\"\n        tsc__rendezvous)\n        tsc__subcmd__rendezvous__subcmd__check)\n            opts=\"tsc__subcmd__rendezvous__subcmd__x\"\n";
        let fixed = fix_bash_states(script, "tsc-rendezvous");
        assert_eq!(
            fixed,
            "            tsc-rendezvous,check)\n                cmd=\"tsc__rendezvous__subcmd__check\"\n        tsc__rendezvous)\n        tsc__rendezvous__subcmd__check)\n            opts=\"tsc__subcmd__rendezvous__subcmd__x\"\n"
        );
        assert_eq!(fix_bash_states(script, "tscrendezvous"), script);
    }
}
