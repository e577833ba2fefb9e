//! The `cairn` binary. A thin layer over the library crates: it parses the
//! command line, reads the clock and the entropy source (which the core
//! never touches), and maps outcomes to exit codes.
//!
//! Exit codes: 0 verified / success, 1 tampering detected or verification
//! failed, 2 usage or input error.

mod demo;

use std::process::ExitCode;

const USAGE: &str = "\
cairn: a tamper-evident ledger of AI agents' reasoning

Usage: cairn <command>

Commands:
  demo       Record a sample agent session, seal it, checkpoint the org log,
             verify everything, then tamper with one step and show that
             verification names the exact record and the reason.
  help       Show this message.
  --version  Show the version.

Exit codes: 0 verified, 1 tampered or verification failed, 2 usage error.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("demo") if args.len() == 1 => match demo::run() {
            Ok(code) => code,
            Err(e) => {
                eprintln!("cairn demo: {e}");
                ExitCode::from(2)
            }
        },
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some("--version" | "-V") => {
            println!("cairn {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        _ => {
            eprint!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
