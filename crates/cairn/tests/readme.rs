//! The README's two quickstarts (the CLI's and the server's), run exactly
//! as written with the binary under test on PATH. (Moved from `cli.rs`.)
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// The first `sh` block under `heading` in the README.
fn readme_script(heading: &str) -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let section = readme
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("README has {heading}"));
    section
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap()
        .to_owned()
}

/// The README's CLI quickstart, run exactly as written (but for the build
/// line: the binary under test is put on PATH instead).
#[test]
fn readme_quickstart_works_as_written() {
    let block = readme_script("## Quickstart with the CLI");
    let block = block.as_str();
    let script: String = block
        .lines()
        .filter(|l| !l.starts_with("cargo build"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(script.contains("cairn verify --bundle"), "{script}");
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env_remove("CAIRN_DATA_DIR")
        .env_remove("CAIRN_ORG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("VERIFIED"), "{stdout}");
    assert!(dir.path().join("s.bundle").exists());
    assert!(
        stdout.contains("## Turn ")
            && stdout.contains(
                "[思考] Check credits first.\n\n[計画] 1. check_credits  2. check_inbox\n"
            ),
        "{stdout}"
    );
}

/// The README's server quickstart, run exactly as written with the binary
/// under test on PATH (on a free port: `CAIRN_LISTEN` overrides the
/// default, and the script reads the address from the server's output).
#[test]
fn readme_server_quickstart_works_as_written() {
    let script = readme_script("## Quickstart with the server");
    let script = script.as_str();
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("CAIRN_LISTEN", "127.0.0.1:0")
        .env_remove("CAIRN_DATA_DIR")
        .env_remove("CAIRN_ORG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"chain_valid\":true"), "{stdout}");
    assert!(stdout.contains("\"verified\":true"), "{stdout}");
    assert!(stdout.contains("VERIFIED"), "{stdout}");
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(log.contains("sample session recorded"), "{log}");
}

/// The README's first command run twice on one data directory: the second
/// start says why it recorded no sample and where the admin key went (it
/// had printed neither, leaving a user's `KEY` empty and every request
/// 401), and a log written to a file holds no terminal colours.
#[test]
fn serving_a_directory_again_says_why_there_is_no_sample_or_key() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    // The lines `cairn serve --sample` prints until it listens, and its
    // log (stderr, a file here).
    let serve = |round: usize| {
        let log = std::fs::File::create(dir.path().join(format!("serve{round}.log"))).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["serve", "--sample", "--listen", "127.0.0.1:0"])
            .env("CAIRN_DATA_DIR", dir.path().join("data"))
            .env_remove("CAIRN_ORG")
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut printed = Vec::new();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let listening = line.contains("listening on http://");
            printed.push(line);
            if listening {
                break;
            }
        }
        // Kept read: a server whose stdout is closed stops at its next line.
        std::thread::spawn(move || for _ in lines {});
        // Its first log line ("serving") follows what it printed.
        let path = dir.path().join(format!("serve{round}.log"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_to_string(&path).unwrap().is_empty()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        (printed.join("\n"), std::fs::read_to_string(&path).unwrap())
    };
    let (first, _) = serve(1);
    assert!(first.contains("admin API key for org default"), "{first}");
    let (second, log) = serve(2);
    assert!(
        second.contains("--sample: org default already holds sessions, so no sample was recorded")
            && second.contains("`cairn admin create-key --role admin` makes another"),
        "{second}"
    );
    assert!(!second.contains("admin API key for org"), "{second}");
    assert!(log.contains("serving") && !log.contains('\u{1b}'), "{log}");
}

/// `cairn serve | head -1`: a standard output closed before the server
/// prints does not stop it (it printed with `println!`, which panics on a
/// closed pipe).
#[test]
fn serve_goes_on_when_its_output_is_closed() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["serve", "--listen", &address])
        .env("CAIRN_DATA_DIR", dir.path().join("data"))
        .env("CAIRN_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Closed before the server has printed anything.
    drop(child.stdout.take());
    let healthy = |address: &str| -> bool {
        let Ok(mut stream) = std::net::TcpStream::connect(address) else {
            return false;
        };
        let _ = write!(
            stream,
            "GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        );
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.1 200")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !healthy(&address) {
        assert!(child.try_wait().unwrap().is_none(), "the server stopped");
        assert!(
            std::time::Instant::now() < deadline,
            "the server never answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "the server stopped");
    let _ = child.kill();
    let _ = child.wait();
}
