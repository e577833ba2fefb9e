//! Analyst SQL in a process of its own (`QueryLimits::worker`), so that
//! what SQLite cannot bound is bounded by the operating system: the
//! memory one row's values and a sort hold (`RLIMIT_DATA`), the temporary
//! files sorts spill to (`RLIMIT_FSIZE`), and the time one call of a
//! built-in takes between two progress checks (the process is killed at
//! the query's deadline, `RLIMIT_CPU` behind that).
//!
//! The server checks and rewrites the caller's statement itself (the
//! guard, `analyst::prepare_counted`), then starts the worker (the `cairn`
//! binary's `analyst-worker` command), writes it one JSON request on its
//! standard input and reads one JSON answer from its standard output. The
//! worker bounds itself before it opens anything, then runs the statement
//! exactly as the server would in its own process
//! ([`super::analyst_sql::run_statement`]): same connection, authorizer,
//! functions and limits.

use super::analyst_sql::run_statement;
use crate::StoreError;
use crate::analyst::{AnalystError, AnalystResult, MAX_COLUMNS, QueryLimits, WorkerLimits};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What the server sends a worker: the statement the guard prepared and
/// the limits it runs within.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct WorkerRequest {
    /// The store's database file.
    pub path: PathBuf,
    /// The statement to run (already checked and rewritten by the guard).
    pub statement: String,
    /// The columns its queries list together (`prepare_counted`).
    pub held_columns: usize,
    /// `QueryLimits::max_rows`.
    pub max_rows: usize,
    /// `QueryLimits::time`, in milliseconds, as the caller is told it.
    pub time_ms: u64,
    /// What is left of it when the worker is started.
    pub time_left_ms: u64,
    /// `QueryLimits::max_value_bytes`.
    pub max_value_bytes: usize,
    /// `QueryLimits::max_answer_bytes`.
    pub max_answer_bytes: usize,
    /// `WorkerLimits::memory_bytes`.
    pub memory_bytes: u64,
    /// `WorkerLimits::temp_file_bytes`.
    pub temp_file_bytes: u64,
    /// The server's process id (the worker ends if its parent is not it).
    pub server_pid: u32,
}

/// What a worker answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum WorkerAnswer {
    Answer {
        columns: Vec<String>,
        rows: Vec<Vec<serde_json::Value>>,
        truncated: bool,
    },
    Refused {
        message: String,
    },
    Failed {
        message: String,
    },
    TimedOut,
    TooLarge {
        message: String,
    },
    Unavailable {
        message: String,
    },
}

/// The most bytes of request a worker reads (the guard refuses statements
/// past 64 KiB; its rewriting adds a bounded amount to each).
const MAX_REQUEST_BYTES: u64 = 16 * 1024 * 1024;

/// How long after the query's deadline a worker that has not answered is
/// killed: its own progress handler stops the query at the deadline; this
/// is for writing the answer, and for a call SQLite cannot interrupt.
const GRACE: Duration = Duration::from_secs(1);

/// Runs `request` in a new worker started as `worker` says, and answers
/// what the worker answered, or why it gave no answer.
pub(super) fn run_in_worker(
    worker: &WorkerLimits,
    request: &WorkerRequest,
    limits: &QueryLimits,
    deadline: Instant,
) -> Result<AnalystResult, AnalystError> {
    // (The worker's path is not named: the caller reads this message.)
    let unavailable = |what: &str, e: std::io::Error| {
        AnalystError::Store(StoreError::Io {
            context: format!("{what} the analyst SQL worker"),
            source: e,
        })
    };
    let body = serde_json::to_vec(request).map_err(|e| unavailable("writing", e.into()))?;
    let mut command = Command::new(&worker.program);
    // Nothing of the server's environment but where temporary files go
    // and the allocator's setting (its secrets, such as the metrics
    // token, are no business of a query); a process group of its own, so
    // that a Ctrl-C meant for the server does not end queries mid-answer.
    command.env_clear();
    for name in WORKER_ENVIRONMENT {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .args(&worker.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| unavailable("starting", e))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(unavailable(
            "connecting to",
            std::io::Error::other("no pipe to the worker"),
        ));
    };
    // Written and read on a thread of its own, so that a worker that
    // stops reading or writing can be killed at the deadline; the answer
    // is read no further than an answer within the limits can be.
    let most = answer_read_limit(limits);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let written = stdin.write_all(&body);
        drop(stdin);
        let mut out = Vec::new();
        let read = stdout.take(most.saturating_add(1)).read_to_end(&mut out);
        let _ = sender.send(written.and(read).map(|_| out));
    });
    // Waited for in short turns: between them the worker's temporary
    // files are measured, all of them together (RLIMIT_FSIZE bounds each
    // one, and a query may hold many at once).
    let out = loop {
        let left = (deadline + GRACE).saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left.min(TEMP_FILES_CHECKED_EVERY)) {
            Ok(out) => break out,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => {
                if temporary_bytes(child.id()) > worker.temp_file_bytes {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(temp_files_exceeded(worker.temp_file_bytes));
                }
            }
            Err(_) => {
                // Past the deadline (the worker may be inside one call
                // SQLite does not interrupt): the process ends here.
                let _ = child.kill();
                let _ = child.wait();
                return Err(AnalystError::TimedOut(limits.time));
            }
        }
    };
    if out.as_ref().is_ok_and(|out| out.len() as u64 > most) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(AnalystError::TooLarge(format!(
            "the answer would be larger than {most} bytes of JSON"
        )));
    }
    let status =
        wait_until(&mut child, deadline + GRACE).map_err(|e| unavailable("waiting for", e))?;
    let Some(status) = status else {
        return Err(AnalystError::TimedOut(limits.time));
    };
    if !status.success() {
        return Err(ended_without_answer(status, worker));
    }
    let out = out.map_err(|e| unavailable("reading", e))?;
    let answer: WorkerAnswer =
        serde_json::from_slice(&out).map_err(|e| unavailable("reading", e.into()))?;
    match answer {
        WorkerAnswer::Answer {
            columns,
            rows,
            truncated,
        } => Ok(AnalystResult {
            columns,
            rows,
            truncated,
        }),
        WorkerAnswer::Refused { message } => Err(AnalystError::Refused(message)),
        WorkerAnswer::Failed { message } => Err(AnalystError::Failed(message)),
        WorkerAnswer::TimedOut => Err(AnalystError::TimedOut(limits.time)),
        WorkerAnswer::TooLarge { message } => Err(AnalystError::TooLarge(message)),
        WorkerAnswer::Unavailable { message } => Err(AnalystError::Store(StoreError::Io {
            context: "in the analyst SQL worker".into(),
            source: std::io::Error::other(message),
        })),
    }
}

/// The variables a worker is started with, if the server has them: where
/// SQLite writes temporary files, and the allocator's threshold `cairn
/// serve` pins (`main.rs`).
const WORKER_ENVIRONMENT: [&str; 3] = ["SQLITE_TMPDIR", "TMPDIR", "MALLOC_MMAP_THRESHOLD_"];

/// How often a running worker's temporary files are measured: a query
/// writing at a few GB/s passes its bound by at most this much writing.
const TEMP_FILES_CHECKED_EVERY: Duration = Duration::from_millis(20);

/// The bytes of the temporary files process `pid` holds open: SQLite
/// deletes each as soon as it opens it, so they are the deleted regular
/// files among its descriptors (`/proc/PID/fd`, whose entries open the
/// file itself even once it has no name). 0 where `/proc` is not there
/// (the per-file bound still holds).
fn temporary_bytes(pid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| {
            std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().ends_with(" (deleted)"))
        })
        .filter_map(|entry| std::fs::metadata(entry.path()).ok())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum()
}

fn temp_files_exceeded(bytes: u64) -> AnalystError {
    AnalystError::TooLarge(format!(
        "the query's temporary files (its sorts and materialized subqueries) would pass {bytes} bytes"
    ))
}

/// The most bytes of JSON an answer within `limits` can take: each value
/// escaped at most six times its size (`\u00XX`), plus a number's digits
/// and a separator for every value of every row.
fn answer_read_limit(limits: &QueryLimits) -> u64 {
    let values = (limits.max_rows as u64).saturating_mul(MAX_COLUMNS as u64);
    (limits.max_answer_bytes as u64)
        .saturating_mul(6)
        .saturating_add(values.saturating_mul(32))
        .saturating_add(1024 * 1024)
}

/// Waits for `child` to end until `until`, then kills it (`None`).
fn wait_until(
    child: &mut std::process::Child,
    until: Instant,
) -> std::io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Why a worker that ended without answering did: the bound it met when
/// the system ended it for one.
fn ended_without_answer(status: ExitStatus, worker: &WorkerLimits) -> AnalystError {
    use std::os::unix::process::ExitStatusExt as _;
    // SIGABRT: an allocation past RLIMIT_DATA in Rust code aborts.
    const SIGABRT: i32 = 6;
    const SIGXCPU: i32 = 24;
    const SIGXFSZ: i32 = 25;
    match status.signal() {
        Some(SIGXFSZ) => temp_files_exceeded(worker.temp_file_bytes),
        Some(SIGABRT) => memory_exceeded(worker.memory_bytes),
        Some(SIGXCPU) => AnalystError::TimedOut(Duration::ZERO),
        _ => AnalystError::Store(StoreError::Io {
            context: "running the analyst SQL worker".into(),
            source: std::io::Error::other(format!("it ended without an answer ({status})")),
        }),
    }
}

fn memory_exceeded(bytes: u64) -> AnalystError {
    AnalystError::TooLarge(format!(
        "the query needed more than the {bytes} bytes of memory an analyst query may hold"
    ))
}

/// The `cairn analyst-worker` command: reads one request on standard
/// input, bounds this process as it says, runs it and writes the answer
/// on standard output. Returns the process's exit code (0 when an answer,
/// a failure included, was written).
pub fn analyst_worker_main() -> i32 {
    let mut input = Vec::new();
    if std::io::stdin()
        .take(MAX_REQUEST_BYTES)
        .read_to_end(&mut input)
        .is_err()
    {
        return 2;
    }
    let Ok(request) = serde_json::from_slice::<WorkerRequest>(&input) else {
        return 2;
    };
    drop(input);
    let started = Instant::now();
    let answer = match bound_this_process(&request) {
        Err(e) => WorkerAnswer::Unavailable {
            message: format!("bounding the worker: {e}"),
        },
        Ok(()) => {
            let limits = QueryLimits {
                max_rows: request.max_rows,
                time: Duration::from_millis(request.time_ms),
                max_value_bytes: request.max_value_bytes,
                max_answer_bytes: request.max_answer_bytes,
                worker: None,
            };
            let deadline = started + Duration::from_millis(request.time_left_ms);
            let run = run_statement(
                &request.path,
                &request.statement,
                request.held_columns,
                &limits,
                deadline,
            );
            match run {
                Ok(result) => WorkerAnswer::Answer {
                    columns: result.columns,
                    rows: result.rows,
                    truncated: result.truncated,
                },
                Err(AnalystError::Refused(message)) => WorkerAnswer::Refused { message },
                Err(AnalystError::Failed(message)) => WorkerAnswer::Failed { message },
                Err(AnalystError::TimedOut(_)) => WorkerAnswer::TimedOut,
                // SQLite's allocation failed (its code, never its words,
                // which may quote the caller's text): past RLIMIT_DATA.
                Err(AnalystError::TooLarge(message))
                    if message == super::analyst_sql::OUT_OF_MEMORY =>
                {
                    WorkerAnswer::TooLarge {
                        message: memory_exceeded(request.memory_bytes).to_string(),
                    }
                }
                Err(AnalystError::TooLarge(message)) => WorkerAnswer::TooLarge { message },
                Err(e) => WorkerAnswer::Unavailable {
                    message: e.to_string(),
                },
            }
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if serde_json::to_writer(&mut out, &answer).is_err() || out.flush().is_err() {
        return 3;
    }
    0
}

/// Sets this process's limits: heap, size of any file written, CPU time
/// (the query's time and two seconds: the server kills it first), and no
/// core file; each no higher than the process may go (a server run under
/// a lower hard limit, systemd's `LimitDATA=`, keeps that one). And it
/// ends with the server: killed if the server dies first.
fn bound_this_process(request: &WorkerRequest) -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let cpu_seconds = request.time_left_ms.div_ceil(1000).saturating_add(2);
    for (resource, value) in [
        (Resource::Data, request.memory_bytes),
        (Resource::Fsize, request.temp_file_bytes),
        (Resource::Cpu, cpu_seconds),
        (Resource::Core, 0),
    ] {
        let value = getrlimit(resource)
            .maximum
            .map_or(value, |hard| value.min(hard));
        setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )?;
    }
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    // The server may have died before that took effect: then this
    // process is already another's child.
    if rustix::process::getppid().map(rustix::process::Pid::as_raw_nonzero)
        != rustix::process::Pid::from_raw(request.server_pid as i32)
            .map(rustix::process::Pid::as_raw_nonzero)
    {
        return Err(std::io::Error::other("the server has ended"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{WorkerRequest, run_in_worker};
    use crate::analyst::{AnalystError, QueryLimits, WorkerLimits};
    use std::time::{Duration, Instant};

    /// A "worker" that is a shell script, standing for a worker the system
    /// ends or that never answers.
    fn run_script(
        script: &str,
        time: Duration,
    ) -> (
        Result<crate::analyst::AnalystResult, AnalystError>,
        Duration,
    ) {
        let worker = WorkerLimits {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            memory_bytes: 1 << 30,
            temp_file_bytes: 1 << 20,
        };
        let limits = QueryLimits {
            time,
            worker: Some(worker.clone()),
            ..QueryLimits::default()
        };
        let request = WorkerRequest {
            path: "/nonexistent".into(),
            statement: "SELECT 1".into(),
            held_columns: 1,
            max_rows: limits.max_rows,
            time_ms: 100,
            time_left_ms: 100,
            max_value_bytes: limits.max_value_bytes,
            max_answer_bytes: limits.max_answer_bytes,
            memory_bytes: worker.memory_bytes,
            temp_file_bytes: worker.temp_file_bytes,
            server_pid: std::process::id(),
        };
        let started = Instant::now();
        let result = run_in_worker(&worker, &request, &limits, started + time);
        (result, started.elapsed())
    }

    /// A worker stuck past the deadline (inside one call SQLite does not
    /// interrupt) is killed a second after it, and the query times out;
    /// one that keeps its standard output open after the answer too.
    #[test]
    fn a_worker_past_its_deadline_is_killed() {
        for script in [
            "cat > /dev/null; sleep 30",
            "cat > /dev/null; printf '{\"outcome\":\"timed_out\"}'; exec sleep 30",
        ] {
            let (result, took) = run_script(script, Duration::from_millis(200));
            assert!(
                matches!(result, Err(AnalystError::TimedOut(t)) if t == Duration::from_millis(200)),
                "{script}: {result:?}"
            );
            assert!(took < Duration::from_secs(5), "{script}: {took:?}");
        }
    }

    /// The bounds the system enforces are named in the answer: a file past
    /// RLIMIT_FSIZE (SIGXFSZ), an allocation past RLIMIT_DATA (Rust
    /// aborts); any other end is the worker's failure, never an answer.
    #[test]
    fn a_worker_the_system_ends_says_which_bound() {
        let ended = |signal: &str| {
            run_script(
                &format!("cat > /dev/null; kill -{signal} $$"),
                Duration::from_secs(5),
            )
            .0
        };
        assert!(
            matches!(ended("XFSZ"), Err(AnalystError::TooLarge(m)) if m.contains("temporary files")),
        );
        assert!(matches!(ended("ABRT"), Err(AnalystError::TooLarge(m)) if m.contains("memory")));
        assert!(matches!(ended("SEGV"), Err(AnalystError::Store(_))));
        let (exit, _) = run_script("cat > /dev/null; exit 2", Duration::from_secs(5));
        assert!(matches!(exit, Err(AnalystError::Store(_))), "{exit:?}");
        let (garbled, _) = run_script("cat > /dev/null; echo '{'", Duration::from_secs(5));
        assert!(
            matches!(garbled, Err(AnalystError::Store(_))),
            "{garbled:?}"
        );
    }

    /// An answer is read no further than an answer within the limits can
    /// take: a worker writing without end is cut off and killed.
    #[test]
    fn an_endless_answer_is_cut_off() {
        let (result, took) = run_script("cat > /dev/null; yes", Duration::from_secs(30));
        assert!(
            matches!(result, Err(AnalystError::TooLarge(ref m)) if m.contains("answer")),
            "{result:?}"
        );
        assert!(took < Duration::from_secs(25), "{took:?}");
    }
}
