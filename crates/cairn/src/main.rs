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
mod records;
mod serve_config;

use std::process::ExitCode;

/// An error caused by the user's input: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// How a command ended.
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1: verification failed.
    VerificationFailed,
}

fn main() -> ExitCode {
    match cli::run() {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::VerificationFailed) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cairn: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(3)
            }
        }
    }
}
