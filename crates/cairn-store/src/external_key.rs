//! A server key held by another process (`--server-key-command`): an HSM
//! or KMS client, a signing agent on another machine reached over ssh.
//! Cairn starts the command once (`sh -c COMMAND`) and speaks a line
//! protocol on its standard input and output (docs/OPERATIONS.md "An
//! external signer"):
//!
//! ```text
//! -> public-key                 <- <base64 of the 32-byte Ed25519 public key>
//! -> sign <base64 message>      <- <base64 of the 64-byte signature>
//! ```
//!
//! One request at a time; an answer that is not one line of the expected
//! size, or none within the timeout, fails that signature (the write that
//! needed it fails, nothing is signed wrongly: every signature is verified
//! with the public key before use) and the process is restarted for the
//! next request. `cairn key-agent --key FILE` is a signer speaking this
//! protocol.

use crate::StoreError;
use crate::keys::ServerKey;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use cairn_core::ed25519_dalek::VerifyingKey;
use cairn_core::note::{NoteSigner, RemoteKey};
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// How long one answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest answer line read (a signature is 88 base64 characters).
const MAX_ANSWER: usize = 1024;

struct Running {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<std::io::Result<String>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A key held by a signer process.
pub struct CommandKey {
    command: String,
    public: VerifyingKey,
    running: Mutex<Option<Running>>,
}

fn start(command: &str) -> Result<Running, String> {
    let mut child = Command::new("sh")
        .args(["-c", command])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting `{command}`: {e}"))?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout: ChildStdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, lines) = mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            let read = (&mut reader)
                .take(MAX_ANSWER as u64)
                .read_line(&mut line)
                .map(|n| (n, line));
            let stop = !matches!(read, Ok((n, _)) if n > 0);
            if tx.send(read.map(|(_, line)| line)).is_err() || stop {
                break;
            }
        }
    });
    Ok(Running {
        child,
        stdin,
        lines,
    })
}

use std::io::Read as _;

impl CommandKey {
    /// Sends one request and reads its one-line answer, restarting the
    /// process if it is not running.
    fn ask(&self, request: &str) -> Result<String, String> {
        let mut guard = self
            .running
            .lock()
            .map_err(|_| "the signer's lock is poisoned".to_owned())?;
        if guard.is_none() {
            *guard = Some(start(&self.command)?);
        }
        let Some(running) = guard.as_mut() else {
            return Err("the signer did not start".into());
        };
        let outcome = writeln!(running.stdin, "{request}")
            .and_then(|()| running.stdin.flush())
            .map_err(|e| format!("writing to the signer: {e}"))
            .and_then(|()| match running.lines.recv_timeout(ANSWER_TIMEOUT) {
                Ok(Ok(line)) if line.ends_with('\n') => Ok(line.trim_end().to_owned()),
                Ok(Ok(line)) if line.is_empty() => Err("the signer exited".into()),
                Ok(Ok(_)) => Err(format!(
                    "the signer's answer is not one line of at most {MAX_ANSWER} bytes"
                )),
                Ok(Err(e)) => Err(format!("reading from the signer: {e}")),
                Err(_) => Err(format!(
                    "the signer did not answer within {} s",
                    ANSWER_TIMEOUT.as_secs()
                )),
            });
        if outcome.is_err() {
            // A signer that misbehaved once is started afresh next time.
            *guard = None;
        }
        outcome
    }

    /// Starts `command` and asks it for its public key.
    pub fn start(command: &str) -> Result<CommandKey, StoreError> {
        let mut key = CommandKey {
            command: command.to_owned(),
            public: VerifyingKey::from_bytes(&[0; 32])
                .map_err(|e| StoreError::Key(e.to_string()))?,
            running: Mutex::new(None),
        };
        let answer = key
            .ask("public-key")
            .map_err(|e| StoreError::Key(format!("the server key command: {e}")))?;
        let bytes: [u8; 32] = B64
            .decode(&answer)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                StoreError::Key(format!(
                    "the server key command answered `public-key` with {answer:?}, not the base64 of 32 bytes"
                ))
            })?;
        key.public = VerifyingKey::from_bytes(&bytes).map_err(|_| {
            StoreError::Key("the server key command's public key is not an Ed25519 point".into())
        })?;
        Ok(key)
    }
}

impl RemoteKey for CommandKey {
    fn public_key(&self) -> VerifyingKey {
        self.public
    }

    fn sign(&self, message: &[u8]) -> Result<[u8; 64], String> {
        let answer = self.ask(&format!("sign {}", B64.encode(message)))?;
        B64.decode(&answer)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| "the signer's answer is not the base64 of 64 bytes".to_owned())
    }
}

/// The server key held by `command`, named `name`.
pub fn command_server_key(command: &str, name: &str) -> Result<ServerKey, StoreError> {
    let key = CommandKey::start(command)?;
    let signer =
        NoteSigner::remote(name, Arc::new(key)).map_err(|e| StoreError::Key(e.to_string()))?;
    // One signature now, so that a signer that cannot sign fails at start.
    signer
        .sign_raw(b"cairn: checking the external signer")
        .map_err(|e| StoreError::Key(format!("the server key command: {e}")))?;
    let verifier = signer.verifier();
    Ok(ServerKey { signer, verifier })
}
