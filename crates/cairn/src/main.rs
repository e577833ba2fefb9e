//! The `cairn` binary: a thin layer over the library crates. It parses the
//! command line, owns the clock and the entropy source (which the core
//! never touches), prints, and maps outcomes to exit codes:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success; for `verify`, verified |
//! | 1 | verification failed: tampering or missing records |
//! | 2 | usage or input error (bad flags, malformed input, refused step) |
//! | 3 | storage or internal failure |

mod cli;
mod demo;
mod embedding_config;
mod monitor_cmd;
mod records;
mod serve_config;
mod session_out;
mod witness_cmd;

use std::process::ExitCode;

/// An error caused by the user's input: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The ledger refused what the command asked (exit code 2, as a usage
/// error): `--json` gives its stable code as `refusal` and the member at
/// fault as `field`, as the HTTP API and `cairn log --stdin` do.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct RefusedError {
    /// The API's error code (`turn_step_taken`, `agent_mismatch`).
    pub code: &'static str,
    /// The member at fault, where there is one.
    pub field: Option<String>,
    /// What went wrong, for a person.
    pub message: String,
}

/// How a command ended.
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1: verification failed.
    VerificationFailed,
}

/// glibc's malloc reads this at start: blocks at least this large are
/// mmapped, and unmapped when freed.
const MMAP_THRESHOLD_VAR: &str = "MALLOC_MMAP_THRESHOLD_";

/// Keeps `cairn serve`'s memory flat under glibc. By default glibc raises
/// its mmap threshold (up to 32 MiB) each time a large mmapped block is
/// freed, so later large blocks (an analyst SQL value built up to
/// `CAIRN_SQL_MAX_VALUE_BYTES`, a request body up to its limit) come from
/// per-thread arenas instead and stay resident after they are freed:
/// `scripts/soak.py` saw RSS climb by ~8 MB a minute, and a few hundred
/// refused 1 GB SQL answers left ~85 MB behind
/// (`tests/python/test_memory.py`). A fixed threshold turns that dynamic
/// raise off. The workspace forbids `unsafe`, so `mallopt` is out: the
/// server re-executes itself once with the threshold in the environment,
/// unless the operator set it (to any value). Other libcs ignore it.
fn pin_malloc_mmap_threshold() {
    use std::os::unix::process::CommandExt as _;
    if !cfg!(all(target_os = "linux", target_env = "gnu"))
        || std::env::var_os(MMAP_THRESHOLD_VAR).is_some()
        || !std::env::args_os().skip(1).any(|a| a == "serve")
    {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    // 128 KiB: glibc's own starting threshold, now kept.
    let error = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env(MMAP_THRESHOLD_VAR, "131072")
        .exec();
    // Only reached if the exec failed: serve anyway, with glibc's default.
    eprintln!("cairn: could not re-execute with {MMAP_THRESHOLD_VAR} set ({error}); continuing");
}

/// The first argument that makes this binary an analyst SQL worker
/// (`cairn_store::analyst_worker_main`), started by `cairn serve`
/// for each analyst query on SQLite: not a command for people.
pub(crate) const ANALYST_WORKER_COMMAND: &str = "internal-analyst-worker";

/// The exit code of a command whose reader stopped reading (`cairn
/// sessions | head`): 128 + SIGPIPE, as a shell reports a tool that
/// signal ended.
const CLOSED_STDOUT: u8 = 141;

/// Ends the command quietly when its standard output is a pipe its reader
/// closed, as SIGPIPE ends other Unix tools: Rust ignores SIGPIPE, so a
/// `println!` to a closed pipe panics (and a `write!` fails, see
/// [`closed_stdout`]).
fn quiet_when_stdout_closes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(i32::from(CLOSED_STDOUT));
        }
        default(info);
    }));
}

/// Whether `error` is a write to a pipe its reader closed.
fn closed_stdout(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// An error and its causes, each cause added only if the text so far
/// does not already say it: errors that print their source in their own
/// message (the store's, the SQLite driver's) had it said two or three
/// times ("file is not a database: file is not a database: Error code 26:
/// file is not a database").
fn error_message(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        // A cause's own text may carry a prefix ("Error code 26: ...")
        // before what was already said.
        let said = |t: &str| !t.is_empty() && message.contains(t);
        if said(&text) || text.split_once(": ").is_some_and(|(_, rest)| said(rest)) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

fn main() -> ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == ANALYST_WORKER_COMMAND)
    {
        let code = cairn_store::analyst_worker_main();
        return ExitCode::from(u8::try_from(code).unwrap_or(3));
    }
    pin_malloc_mmap_threshold();
    quiet_when_stdout_closes();
    match cli::run() {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::VerificationFailed) => ExitCode::from(1),
        Err(e) if closed_stdout(&e) => ExitCode::from(CLOSED_STDOUT),
        Err(e) => {
            let refused = e.downcast_ref::<RefusedError>();
            let usage = e.downcast_ref::<UsageError>().is_some() || refused.is_some();
            let message = error_message(&e);
            // An error may quote what it read (a bundle's line, a file's
            // text): shown, not obeyed, by the terminal.
            eprintln!("cairn: {}", cairn_server::render::terminal_safe(&message));
            // A script that asked for JSON gets its error as JSON too, on
            // standard output where it reads the rest (the exit code says
            // which kind).
            if std::env::args_os().any(|a| a == "--json") {
                let code = if usage { "usage" } else { "failure" };
                let mut error = serde_json::json!({"code": code, "message": message});
                if let Some(refused) = refused {
                    error["refusal"] = refused.code.into();
                    if let Some(field) = &refused.field {
                        error["field"] = field.as_str().into();
                    }
                }
                println!("{}", serde_json::json!({ "error": error }));
            }
            ExitCode::from(if usage { 2 } else { 3 })
        }
    }
}
