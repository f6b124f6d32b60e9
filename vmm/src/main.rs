//! `tsc-rendezvous`: the command-line entry point. Parsing, logging, and the
//! subcommand the arguments name (see [`tsc_vmm::dispatch`]); exit codes as
//! `--help` states them.

use std::process::ExitCode;

use clap::Parser;

use tsc_vmm::{dispatch, Cli};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // clap: 0 for --help/--version, 2 for usage errors.
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp_millis()
        .init();
    dispatch(cli).into()
}
