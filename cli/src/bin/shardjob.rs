//! The `shardjob` command line.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use shardjob_cli::cli::LogFormat;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = match shardjob_cli::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage(&e),
    };
    // Logs go to stderr; RUST_LOG overrides. The demo's table is the show (and its crash is
    // on purpose), so it logs nothing by default.
    let default = match cli.command {
        shardjob_cli::cli::Command::Demo(_) => "off",
        // The operating commands print their result; the client's connection logs are noise.
        shardjob_cli::cli::Command::Ops(_) | shardjob_cli::cli::Command::Config(_) => "warn",
        _ => "info",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => builder
            .with_ansi(colour(std::io::stderr().is_terminal()))
            .init(),
        // One object per line; the event's fields at the top level, beside the message.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    let mut stdout = std::io::stdout().lock();
    let result = shardjob_cli::cli::run(cli, chrono::Utc::now(), &mut stdout);
    exit_code(result)
}

/// The process's exit code for the outcome of a command. A reader that went away
/// (`shardjob cron next ... | head -1`) is no failure: nobody reads the rest, so the command
/// ends quietly with status 0. Any other failure is said on stderr, with status 2.
fn exit_code(result: Result<ExitCode, shardjob_cli::cli::CliError>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(shardjob_cli::cli::CliError::Output(e))
            if e.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shardjob: {e}");
            ExitCode::from(2)
        }
    }
}

/// A command line clap refused, or `--help`/`--version`: clap prints it (on stderr for an
/// error, on stdout for help); the status is 0 for help and version, 1 for a usage error
/// (bad input, as for every command; clap's own 2 is the operating commands' "registry
/// unreachable").
fn usage(e: &clap::Error) -> ExitCode {
    // Printing can only fail when the terminal has gone; the status still says what happened.
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Colour codes only on a terminal, and never when NO_COLOR is set (<https://no-color.org>).
fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
