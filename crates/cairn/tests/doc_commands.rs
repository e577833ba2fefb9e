//! Every `cairn ...` command the documentation shows (README, docs/, the
//! clients' READMEs and examples) names subcommands and flags the binary
//! has: each is run with `--help` appended, which parses it as far as its
//! last word and prints help (exit 0) only if every word before was
//! understood. (The clients' docs once said `cairn keys create`, a
//! command that never existed.)
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files a reader takes commands from.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "docs/seeds", "clients/python", "clients/typescript"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    for dir in ["clients/python/examples", "clients/typescript/examples"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            files.push(entry.unwrap().path());
        }
    }
    files
}

/// Where a command's words end: what a shell would do with them next, or
/// a placeholder a reader fills in.
fn stops(word: &str) -> bool {
    word.is_empty()
        || word.starts_with('-') && word.contains('=') && word.contains('$')
        || word.chars().any(|c| "$<>|;&`()[]{}…\\".contains(c))
        || word.contains("...")
        || word
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
}

/// A command's words, split as a shell splits them (single and double
/// quotes), up to the first that [`stops`] it.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut quoted = false;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                quoted = true;
            }
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() || quoted {
                    if stops(&word) && !quoted {
                        return out;
                    }
                    out.push(std::mem::take(&mut word));
                    quoted = false;
                }
            }
            (None, c) => word.push(c),
        }
    }
    if quote.is_none() && (!word.is_empty() || quoted) && (quoted || !stops(&word)) {
        out.push(word);
    }
    out
}

/// Every command shown: inline code spans and code lines that start with
/// `cairn ` (the words after it).
fn commands(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        let candidates: Vec<&str> = if i % 2 == 1 {
            vec![span]
        } else {
            span.lines().collect()
        };
        for line in candidates {
            let line = line.trim_start().trim_start_matches("$ ");
            if let Some(rest) = line.strip_prefix("cairn ") {
                // Only lines that are commands, not prose naming one.
                if i % 2 == 1 || text.contains(&format!("\n{line}")) {
                    found.push(rest.to_owned());
                }
            }
        }
    }
    found
}

#[test]
fn every_documented_command_parses() {
    let mut failed = Vec::new();
    let mut checked = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        for command in commands(&text) {
            let mut args = words(&command);
            // A subcommand alone is checked too; nothing at all is not.
            if args.is_empty() || args[0].starts_with('-') && args.len() == 1 {
                continue;
            }
            // The analyst worker the server starts (not a command for
            // people) reads its request, not flags.
            if args[0] == "internal-analyst-worker" {
                continue;
            }
            args.push("--help".into());
            let run = Command::new(env!("CARGO_BIN_EXE_cairn"))
                .args(&args)
                .env_remove("CAIRN_ORG")
                .output()
                .unwrap();
            checked += 1;
            // A flag whose value the document leaves to the reader (a
            // placeholder, or prose naming the flag alone) is known to the
            // parser when it asks for that value.
            let stderr = String::from_utf8_lossy(&run.stderr);
            let understood = run.status.success()
                || stderr.contains("a value is required for")
                || stderr.contains("invalid value");
            if !understood {
                failed.push(format!(
                    "{}: cairn {command}\n    {}",
                    file.display(),
                    stderr.lines().next().unwrap_or("")
                ));
            }
        }
    }
    assert!(checked > 50, "only {checked} commands found");
    assert!(
        failed.is_empty(),
        "{} of {checked}:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
