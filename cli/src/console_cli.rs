//! `shardjob console`: the web console ([`shardjob_console`]), and `--add-user` to put a user
//! in its configuration file.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use shardjob_console::{DEFAULT_CONFIG, DEFAULT_LISTEN, Role};

use crate::cli::CliError;

/// Arguments of `shardjob console`.
#[derive(Debug, clap::Args)]
pub struct ConsoleArgs {
    /// Where to listen: HOST:PORT (a port alone binds 127.0.0.1). Loopback by default: to
    /// serve other machines, name their interface (and put TLS in front, with
    /// `secure_cookie: true` in the file).
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "HOST:PORT")]
    pub listen: String,
    /// The configuration file: users (argon2 hashes), registries. Created by `--add-user`.
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Add a user to the file (or set a new password and role for one), then exit. The
    /// password is asked on the terminal (or read as one line from stdin when it is not a
    /// terminal); there is no default password.
    #[arg(long, value_name = "NAME")]
    pub add_user: Option<String>,
    /// The role of `--add-user`: admin (operates) or viewer (reads only).
    #[arg(
        long,
        value_name = "ROLE",
        requires = "add_user",
        default_value = "viewer"
    )]
    pub role: String,
}

/// Runs `shardjob console`; `Err` holds the problem to print (exit 1).
pub fn run(args: &ConsoleArgs, out: &mut dyn Write) -> Result<Result<(), String>, CliError> {
    if let Some(name) = &args.add_user {
        return add_user(args, name, out);
    }
    let listen = match shardjob_console::parse_listen(&args.listen) {
        Ok(a) => a,
        Err(e) => return Ok(Err(format!("error: {e}"))),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    let config = args.config.clone();
    let result = rt.block_on(async move {
        let app = shardjob_console::App::start(config)?;
        shardjob_console::serve(app, listen, stop_signal(), |addr| {
            tracing::info!(%addr, "console listening");
            // One line on stdout for people and for scripts that start it with port 0.
            println!("shardjob console: http://{addr}/ (Ctrl-C stops it)");
            let _ = std::io::stdout().flush();
        })
        .await
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(()) => {
            writeln!(out, "shardjob console: stopped")?;
            Ok(Ok(()))
        }
        Err(e) => Ok(Err(format!("error: {e}"))),
    }
}

async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).ok();
        let term = async {
            match &mut term {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = term => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

fn add_user(
    args: &ConsoleArgs,
    name: &str,
    out: &mut dyn Write,
) -> Result<Result<(), String>, CliError> {
    let role: Role = match args.role.parse() {
        Ok(r) => r,
        Err(e) => return Ok(Err(format!("error: --role: {e}"))),
    };
    let password = if std::io::stdin().is_terminal() {
        let first = match rpassword::prompt_password(format!("Password for {name}: ")) {
            Ok(p) => p,
            Err(e) => return Ok(Err(format!("error: cannot read the password: {e}"))),
        };
        let again = match rpassword::prompt_password("Again: ") {
            Ok(p) => p,
            Err(e) => return Ok(Err(format!("error: cannot read the password: {e}"))),
        };
        if first != again {
            return Ok(Err(
                "error: the two passwords differ: nothing written".to_owned()
            ));
        }
        first
    } else {
        let mut line = String::new();
        if let Err(e) = std::io::stdin().lock().read_line(&mut line) {
            return Ok(Err(format!(
                "error: cannot read the password from stdin: {e}"
            )));
        }
        line.trim_end_matches(['\r', '\n']).to_owned()
    };
    match shardjob_console::add_user(&args.config, name, role, &password) {
        Ok(new) => {
            writeln!(
                out,
                "{} user {name} ({}) in {}",
                if new { "added" } else { "updated" },
                role.as_str(),
                args.config.display()
            )?;
            Ok(Ok(()))
        }
        Err(e) => Ok(Err(format!("error: {e}"))),
    }
}
