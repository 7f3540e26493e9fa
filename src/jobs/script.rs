//! The Script job: runs a command per item, without a shell.
//!
//! The prop keys and defaults are always here (a job file names them); the job itself,
//! [`ScriptJob`], and [`check_prop`] need the `script` feature.

#[cfg(feature = "script")]
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

#[cfg(feature = "script")]
use async_trait::async_trait;
#[cfg(feature = "script")]
use tokio::io::{AsyncRead, AsyncReadExt};
#[cfg(feature = "script")]
use tokio::process::Command;

#[cfg(feature = "script")]
use super::{CapturedOutput, Job, JobError, ShardingContext};

/// The prop holding the command line (required), split into arguments as a shell would quote
/// them but run without a shell.
pub const PROP_COMMAND_LINE: &str = "script.command.line";
/// The prop holding the timeout of one item in milliseconds; `0` means none.
pub const PROP_TIMEOUT: &str = "script.timeout.milliseconds";
/// The prop holding how many bytes of each of stdout and stderr are kept per item (the end).
pub const PROP_OUTPUT_LIMIT: &str = "script.output.limit.bytes";
/// The timeout when [`PROP_TIMEOUT`] is not set: one hour.
pub const DEFAULT_SCRIPT_TIMEOUT: Duration = Duration::from_secs(3600);
/// The output limit when [`PROP_OUTPUT_LIMIT`] is not set: 64 KiB per stream.
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024;
/// The environment variable that gives a script the item's scheduled fire time (the trigger
/// time for a manual trigger), RFC 3339 in UTC with milliseconds:
/// `2027-01-30T16:00:05.000Z`.
pub const ENV_FIRE_TIME: &str = "SHARDJOB_FIRE_TIME";
/// The environment variable that says why the item runs: `SCHEDULED`, `MISFIRE`, `FAILOVER`
/// or `TRIGGER`.
pub const ENV_RUN_KIND: &str = "SHARDJOB_RUN_KIND";
/// The environment variable that gives a script the item's fencing token (decimal).
pub const ENV_FENCING_TOKEN: &str = "SHARDJOB_FENCING_TOKEN";

/// Every prop a Script job reads.
pub const PROPS: &[&str] = &[PROP_COMMAND_LINE, PROP_TIMEOUT, PROP_OUTPUT_LIMIT];

/// The props a Script job cannot run without.
pub const REQUIRED_PROPS: &[&str] = &[PROP_COMMAND_LINE];

/// Checks one prop's value as [`ScriptJob`] reads it at every run (an empty command line is
/// left to the check for required props): `Err` says what is wrong. Keys it does not read
/// pass.
#[cfg(feature = "script")]
pub fn check_prop(key: &str, value: &str) -> Result<(), String> {
    let text = value.trim();
    match key {
        PROP_COMMAND_LINE if text.is_empty() => Ok(()),
        PROP_COMMAND_LINE => split_command_line(value)
            .map(|_| ())
            .map_err(|e| format!("cannot be split into words: {e}")),
        PROP_TIMEOUT => text
            .parse::<u64>()
            .map(|_| ())
            .map_err(|_| format!("{value:?} is not a number of milliseconds (0: no timeout)")),
        PROP_OUTPUT_LIMIT => text
            .parse::<usize>()
            .map(|_| ())
            .map_err(|_| format!("{value:?} is not a byte count")),
        _ => Ok(()),
    }
}

/// Why a command line cannot be split.
#[cfg(feature = "script")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A quote is opened and never closed.
    #[error("unterminated {0} quote")]
    UnterminatedQuote(&'static str),
    /// The line ends with a lone backslash.
    #[error("the command line ends with a lone backslash")]
    TrailingBackslash,
    /// There is no word at all.
    #[error("the command line is empty")]
    Empty,
    /// The line holds a `#` and every private-use character (over 137,000 different ones), so
    /// no character is left to stand in for the `#` (see [`split_command_line`]).
    #[error("the command line holds every private-use character: it cannot be split")]
    NoStandIn,
}

/// Splits `line` into words the way a POSIX shell quotes them (with the `shell-words` crate),
/// without a shell: no expansion, no redirection, no variables. Spaces, tabs and newlines
/// separate words; `'...'` is literal; `"..."` is literal except that a backslash escapes
/// `"`, `\`, `$` and `` ` ``; outside quotes a backslash escapes any character; a backslash
/// before a newline joins the lines. Unlike a shell, `#` starts no comment: it is a character
/// like any other (as in ElasticJob, whose command line has no comments either).
///
/// ```
/// # use shardjob::jobs::split_command_line;
/// let words = split_command_line(r#"python3 -c 'print("hi")' "a b" c\ d #1"#).unwrap();
/// assert_eq!(words, ["python3", "-c", r#"print("hi")"#, "a b", "c d", "#1"]);
/// ```
#[cfg(feature = "script")]
pub fn split_command_line(line: &str) -> Result<Vec<String>, SplitError> {
    // shell-words reads a `#` at the start of a word as a comment to the end of the line. It
    // is given a character that is not in the line instead (one it treats as ordinary), and
    // the words get their `#` back.
    let stand_in = if line.contains('#') {
        let used: std::collections::BTreeSet<char> = line.chars().collect();
        let free = ('\u{E000}'..='\u{F8FF}')
            .chain('\u{F0000}'..='\u{FFFFD}')
            .chain('\u{100000}'..='\u{10FFFD}')
            .find(|c| !used.contains(c));
        Some(free.ok_or(SplitError::NoStandIn)?)
    } else {
        None
    };
    let text: std::borrow::Cow<'_, str> = match stand_in {
        Some(c) => line.replace('#', c.encode_utf8(&mut [0; 4])).into(),
        None => line.into(),
    };
    let words = match shell_words::split(&text) {
        Ok(words) => words,
        // Only a quote left open fails: closing a single quote mends the line only if that
        // is the one left open (in double quotes `'` is an ordinary character).
        Err(_) if shell_words::split(&format!("{text}'")).is_ok() => {
            return Err(SplitError::UnterminatedQuote("single"));
        }
        Err(_) => return Err(SplitError::UnterminatedQuote("double")),
    };
    // shell-words keeps a backslash that escapes nothing at the end as a character; that is a
    // line cut short. The backslashes that end a line that split are all outside quotes, so
    // the last one escapes nothing when there is an odd number of them.
    if text.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1 {
        return Err(SplitError::TrailingBackslash);
    }
    if words.is_empty() {
        return Err(SplitError::Empty);
    }
    Ok(match stand_in {
        Some(c) => words.into_iter().map(|w| w.replace(c, "#")).collect(),
        None => words,
    })
}

/// How long a killed script may take to be reaped, and its pipes to drain, before the item is
/// reported anyway.
#[cfg(feature = "script")]
const REAP_TIMEOUT: Duration = Duration::from_secs(5);
#[cfg(feature = "script")]
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// ElasticJob's Script job (type `SCRIPT`): for each item, runs `script.command.line` with the
/// item's [`ShardingContext`] JSON appended as the last argument.
///
/// Unlike ElasticJob: the command line is split into argv and run without a shell (quote
/// arguments as in a shell; `$`, `;`, `|`, `*` mean nothing); each item has a timeout
/// ([`PROP_TIMEOUT`], default one hour) after which the process is killed; a cancelled run
/// kills it too (with every process in its group: the script runs in a process group of its
/// own, and on Linux dies with the `shardjob` process); stdout and stderr are captured per item, the last [`PROP_OUTPUT_LIMIT`]
/// bytes of each; exit status 0 is success, anything else (or a signal) a failure.
///
/// What the context JSON leaves out (it keeps ElasticJob's fields only) comes in environment
/// variables: [`ENV_FIRE_TIME`], [`ENV_RUN_KIND`] and [`ENV_FENCING_TOKEN`].
#[cfg(feature = "script")]
#[derive(Debug, Clone, Copy, Default)]
pub struct ScriptJob;

#[cfg(feature = "script")]
enum End {
    Exited(std::process::ExitStatus),
    WaitFailed(std::io::Error),
    TimedOut,
    Cancelled,
}

#[cfg(feature = "script")]
#[async_trait]
impl Job for ScriptJob {
    fn job_type(&self) -> String {
        "SCRIPT".to_owned()
    }

    async fn execute_item(
        &self,
        ctx: &ShardingContext,
    ) -> Result<Option<CapturedOutput>, JobError> {
        let line = ctx
            .prop(PROP_COMMAND_LINE)
            .filter(|l| !l.trim().is_empty())
            .ok_or_else(|| JobError::Config(format!("props {PROP_COMMAND_LINE} is required")))?;
        let mut argv = split_command_line(line)
            .map_err(|e| JobError::Config(format!("{PROP_COMMAND_LINE}: {e}")))?;
        let timeout = match ctx.prop(PROP_TIMEOUT) {
            None => Some(DEFAULT_SCRIPT_TIMEOUT),
            Some(text) => match text.trim().parse::<u64>() {
                Ok(0) => None,
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(_) => {
                    return Err(JobError::Config(format!(
                        "{PROP_TIMEOUT}: {text:?} is not a number of milliseconds"
                    )));
                }
            },
        };
        let limit = match ctx.prop(PROP_OUTPUT_LIMIT) {
            None => DEFAULT_OUTPUT_LIMIT,
            Some(text) => text.trim().parse::<usize>().map_err(|_| {
                JobError::Config(format!("{PROP_OUTPUT_LIMIT}: {text:?} is not a byte count"))
            })?,
        };
        argv.push(ctx.to_json());
        let program = argv.remove(0);

        let mut command = Command::new(&program);
        own_group_dying_with_us(&mut command);
        let mut child = command
            .args(&argv)
            .env(
                ENV_FIRE_TIME,
                ctx.fire_time
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            )
            .env(ENV_RUN_KIND, ctx.kind.as_str())
            .env(ENV_FENCING_TOKEN, ctx.fencing_token.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| JobError::Io(format!("cannot start {program:?}: {e}")))?;
        // Dropped before `child` (declared after it): a run dropped mid-way (its task
        // aborted) kills the script's whole group, not only the script.
        let mut group = Group(child.id());
        let stdout = Arc::new(Mutex::new(Tail::new(limit)));
        let stderr = Arc::new(Mutex::new(Tail::new(limit)));
        let mut readers = tokio::task::JoinSet::new();
        if let Some(pipe) = child.stdout.take() {
            readers.spawn(drain(pipe, Arc::clone(&stdout)));
        }
        if let Some(pipe) = child.stderr.take() {
            readers.spawn(drain(pipe, Arc::clone(&stderr)));
        }

        let end = tokio::select! {
            status = child.wait() => match status {
                Ok(s) => End::Exited(s),
                Err(e) => End::WaitFailed(e),
            },
            () = sleep_opt(timeout) => End::TimedOut,
            _ = ctx.cancel.cancelled() => End::Cancelled,
        };
        if matches!(end, End::TimedOut | End::Cancelled) {
            // The script and whatever it started in its group; then the script itself in
            // case it left the group. Killing fails only if it already exited; reap it
            // either way, within a bound.
            group.kill();
            let _ = child.start_kill();
            let _ = tokio::time::timeout(REAP_TIMEOUT, child.wait()).await;
        }
        // Ended (or reaped): a process it left in its group lives on, as it would under a
        // shell; only a script stopped before its end takes its group with it.
        group.0 = None;
        // A process it started may still hold the pipes open: read what is there, not more.
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while readers.join_next().await.is_some() {}
        })
        .await;
        readers.abort_all();
        let output = CapturedOutput {
            stdout: snapshot(&stdout).0,
            stdout_truncated: snapshot(&stdout).1,
            stderr: snapshot(&stderr).0,
            stderr_truncated: snapshot(&stderr).1,
        };
        match end {
            End::Exited(status) if status.success() => Ok(Some(output)),
            End::Exited(status) => Err(JobError::ScriptFailed {
                status: describe(status),
                output,
            }),
            End::WaitFailed(e) => Err(JobError::Io(format!("waiting for {program:?}: {e}"))),
            End::TimedOut => Err(JobError::TimedOut {
                after: timeout.unwrap_or_default(),
                output,
            }),
            End::Cancelled => Err(JobError::Cancelled),
        }
    }
}

/// Starts the script in a process group of its own (its id is the script's pid), so that a
/// cancelled or timed-out run kills what the script started too, and a Ctrl-C typed at
/// `shardjob` reaches `shardjob` alone (which then decides). On Linux the script is also
/// killed (SIGKILL) when the thread that started it dies: a `shardjob` killed with SIGKILL,
/// or by the OOM killer, takes its scripts with it instead of leaving them running while
/// their items fail over to another instance. (Tokio starts it from a runtime worker thread,
/// which lives as long as the runtime.) Processes the script starts are not covered by the
/// latter: a supervisor should kill the whole control group (see the README).
#[cfg(feature = "script")]
fn own_group_dying_with_us(command: &mut Command) {
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed: it calls prctl(2) and getppid(2), both
        // async-signal-safe, allocates nothing and takes no lock (io::Error::last_os_error
        // only reads errno).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent died before the prctl: the signal will never come.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(std::io::Error::other("shardjob exited"));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(unix))]
    let _ = command;
}

/// A running script's process group, killed when dropped unless cleared (`.0 = None`) once
/// the script has ended.
#[cfg(feature = "script")]
struct Group(Option<u32>);

#[cfg(feature = "script")]
impl Group {
    fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.0.and_then(|id| i32::try_from(id).ok()) {
            if pgid > 1 {
                // SAFETY: kill(2) with a negative pid signals the process group the script
                // leads (made with `process_group(0)`); it touches no memory of ours. The
                // script is not reaped yet, so its pid (the group's id) is not reused.
                unsafe {
                    libc::kill(-pgid, libc::SIGKILL);
                }
            }
        }
        self.0 = None;
    }
}

#[cfg(feature = "script")]
impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(feature = "script")]
async fn sleep_opt(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(feature = "script")]
fn describe(status: std::process::ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("signal {signal}");
        }
    }
    status.to_string()
}

/// The last `limit` bytes of a stream.
#[cfg(feature = "script")]
#[derive(Debug)]
struct Tail {
    limit: usize,
    buf: Vec<u8>,
    dropped: u64,
}

#[cfg(feature = "script")]
impl Tail {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            buf: Vec::new(),
            dropped: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        // Trim in batches so a chatty script costs amortized O(1) per byte.
        if self.buf.len() > self.limit.saturating_mul(2).max(4096) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.buf.len() > self.limit {
            let cut = self.buf.len() - self.limit;
            self.buf.drain(..cut);
            self.dropped += cut as u64;
        }
    }
}

#[cfg(feature = "script")]
fn snapshot(tail: &Mutex<Tail>) -> (String, u64) {
    let mut t = tail.lock().unwrap_or_else(PoisonError::into_inner);
    t.trim();
    (String::from_utf8_lossy(&t.buf).into_owned(), t.dropped)
}

#[cfg(feature = "script")]
async fn drain(mut pipe: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>) {
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => tail
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(&chunk[..n]),
        }
    }
}

#[cfg(all(test, feature = "script"))]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<String> {
        split_command_line(s).unwrap()
    }

    #[test]
    fn plain_words_and_whitespace() {
        assert_eq!(split("  echo   a\tb\nc "), ["echo", "a", "b", "c"]);
    }

    #[test]
    fn quotes() {
        assert_eq!(
            split(r#"a 'b c' "d e" f"g"'h'"#),
            ["a", "b c", "d e", "fgh"]
        );
        assert_eq!(split(r#"'' "" x"#), ["", "", "x"]);
        assert_eq!(split(r#""a \"b\" \\ \$ \n""#), [r#"a "b" \ $ \n"#]);
        assert_eq!(split(r#"'a\b'"#), [r"a\b"]);
        assert_eq!(split(r"a\ b \'c"), ["a b", "'c"]);
    }

    #[test]
    fn no_shell_meaning() {
        assert_eq!(split("echo $HOME; rm *"), ["echo", "$HOME;", "rm", "*"]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            split_command_line("a 'b"),
            Err(SplitError::UnterminatedQuote("single"))
        );
        assert_eq!(
            split_command_line("a \"b"),
            Err(SplitError::UnterminatedQuote("double"))
        );
        assert_eq!(
            split_command_line("a \\"),
            Err(SplitError::TrailingBackslash)
        );
        assert_eq!(split_command_line("   "), Err(SplitError::Empty));
    }

    #[test]
    fn a_hash_is_an_ordinary_character() {
        assert_eq!(
            split("echo #1 a#b '#' \\#"),
            ["echo", "#1", "a#b", "#", "#"]
        );
        // The stand-in is a character the line does not hold.
        assert_eq!(split("\u{E000} #"), ["\u{E000}", "#"]);
    }

    #[test]
    fn an_escaped_backslash_at_the_end_is_no_lone_one() {
        assert_eq!(split(r"a\\"), [r"a\"]);
        assert_eq!(
            split_command_line(r"a\\\"),
            Err(SplitError::TrailingBackslash)
        );
        assert_eq!(split("a \\\nb"), ["a", "b"]);
    }

    #[test]
    fn tail_keeps_the_end() {
        let mut t = Tail::new(4);
        for _ in 0..3000 {
            t.push(b"abc");
        }
        t.push(b"xyz");
        t.trim();
        assert_eq!(t.buf, b"cxyz");
        assert_eq!(t.dropped, 9003 - 4);
    }
}
