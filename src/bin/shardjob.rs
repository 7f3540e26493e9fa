//! The `shardjob` command line.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = shardjob::cli::Cli::parse();
    let mut stdout = std::io::stdout().lock();
    match shardjob::cli::run(cli, chrono::Utc::now(), &mut stdout) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shardjob: {e}");
            ExitCode::from(2)
        }
    }
}
