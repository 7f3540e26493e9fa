//! The `shardjob` command line.

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = shardjob::cli::Cli::parse();
    // Logs go to stderr; RUST_LOG overrides. The demo's table is the show (and its crash is
    // on purpose), so it logs nothing by default.
    let default = match cli.command {
        shardjob::cli::Command::Demo(_) => "off",
        // The operating commands print their result; the client's connection logs are noise.
        shardjob::cli::Command::Ops(_) | shardjob::cli::Command::Config(_) => "warn",
        _ => "info",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let mut stdout = std::io::stdout().lock();
    match shardjob::cli::run(cli, chrono::Utc::now(), &mut stdout) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shardjob: {e}");
            ExitCode::from(2)
        }
    }
}
