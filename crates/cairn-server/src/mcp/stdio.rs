//! MCP over stdio (`cairn mcp`), read as strictly as `/mcp` reads a
//! request body.
//!
//! The MCP SDK reads each line with plain serde_json, which keeps the last
//! of two members with one name, turns an integer beyond 64 bits into a
//! float, and reads an object holding one of its private marker names
//! (`$serde_json::private::…`) as another value. So every line from the
//! client passes [`super::check_message`] first, as every `/mcp` body does: a
//! line that fails it never reaches the SDK, and the client gets a
//! JSON-RPC error answering its request (`-32600`, the message saying
//! what to change), or nothing for a notification, whose sender expects
//! no answer. A line that is not JSON at all is dropped, as the SDK and
//! the other official SDKs drop it (an answer could start an error storm
//! with a peer that echoes it). A byte order mark before a line is
//! skipped, as the SDK skips it. A line longer than [`MAX_LINE_BYTES`]
//! with its end (the SDK's own limit) is not held in memory: it is
//! answered with an error whose id is null, since its id was not kept.
//!
//! stdin is read on a thread of its own that is never joined, so that
//! the process ends with the service (a failed handshake) even while the
//! client keeps stdin open; every answer queued by then is written first,
//! for as long as the client reads ([`DRAIN`], as the SDK waits for its
//! own). Refusals never make that thread wait: a client may write all its
//! requests before reading any answer, as it may with the SDK alone. What
//! it drops is logged at debug level only, as the SDK logs it, so that a
//! stderr nobody reads cannot stop it either.

use super::{CairnMcp, Refused, check_message, refused};
use rmcp::ServiceExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The longest line read, its end included (16 MiB, the limit the MCP
/// SDK's stdio reader has itself).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One line of the client's input.
enum Line {
    /// A whole line, without its end.
    Text(Vec<u8>),
    /// A line longer than the limit (dropped as it was read).
    TooLong,
}

/// Reads one line of at most `limit` bytes without holding more than
/// that in memory; `None` at the end of the input.
fn read_line(input: &mut impl std::io::BufRead, limit: usize) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = input.fill_buf()?;
        if available.is_empty() {
            return Ok(match (line.is_empty(), too_long) {
                (true, false) => None,
                (_, true) => Some(Line::TooLong),
                (false, false) => Some(Line::Text(line)),
            });
        }
        let end = available.iter().position(|&b| b == b'\n');
        let take = end.map_or(available.len(), |at| at + 1);
        if !too_long {
            let part = &available[..end.unwrap_or(available.len())];
            if line.len() + part.len() > limit {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(part);
            }
        }
        input.consume(take);
        if end.is_some() {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some(if too_long {
                Line::TooLong
            } else {
                Line::Text(line)
            }));
        }
    }
}

/// What to do with one line of the client's input: pass it to the SDK,
/// answer it with an error, or drop it.
enum Verdict {
    Pass,
    Answer(Vec<u8>),
    Drop(String),
}

/// A JSON-RPC error answer (`-32600`, Invalid Request) as one line.
fn error_line(id: Value, message: &str) -> Vec<u8> {
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32600, "message": message},
    });
    let mut bytes = answer.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

fn judge(line: &[u8]) -> Verdict {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Pass;
    }
    let problem = match check_message(line) {
        Ok(_) => return Verdict::Pass,
        Err(problem) => problem,
    };
    match refused(line) {
        Refused::NotJson => {
            Verdict::Drop(format!("a line that is not JSON was dropped: {problem}"))
        }
        Refused::NotACall => Verdict::Drop(format!("a message was refused: {problem}")),
        // A notification (no id) expects no answer.
        Refused::Notification => Verdict::Drop(format!("a notification was refused: {problem}")),
        other => Verdict::Answer(error_line(other.id(), &problem)),
    }
}

/// Reads the client's lines until its input ends: each that passes
/// [`judge`] goes to the SDK through `to_sdk`, each refusal to `answers`.
/// Stops early once nothing can be answered any more (stdout closed).
fn gate(
    to_sdk: &tokio::sync::mpsc::Sender<Vec<u8>>,
    answers: &tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut stdin = std::io::stdin().lock();
    loop {
        // The SDK counts the line's end in its limit.
        let line = match read_line(&mut stdin, MAX_LINE_BYTES - 1) {
            Ok(Some(Line::Text(line))) => line,
            Ok(Some(Line::TooLong)) => {
                let problem =
                    format!("the message is longer than {MAX_LINE_BYTES} bytes with its line end");
                if answers.send(error_line(Value::Null, &problem)).is_err() {
                    return;
                }
                continue;
            }
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("reading the MCP client's input: {e}");
                return;
            }
        };
        // A byte order mark, which the SDK skips too.
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&line);
        let sent = match judge(line) {
            Verdict::Pass if !answers.is_closed() => {
                let mut line = line.to_vec();
                line.push(b'\n');
                to_sdk.blocking_send(line).map_err(|_| ())
            }
            Verdict::Pass => return,
            // Never waits: a refusal must not stop the reading of stdin
            // while the client, writing all its requests before it reads
            // an answer, waits for stdin to take them (the SDK, too, keeps
            // reading while its answers wait).
            Verdict::Answer(answer) => answers.send(answer).map_err(|_| ()),
            // At debug level only, as the SDK logs what it drops: a line
            // written to a stderr nobody reads would stop this thread.
            Verdict::Drop(why) => {
                tracing::debug!("{why}");
                Ok(())
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

/// How long answers still queued when the service ends may take to be
/// written (the SDK gives its own in-flight answers as long): a client
/// that closed stdin and stopped reading must not hold the process.
pub const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves `server` on this process's standard input and output, every
/// line of input checked by [`super::check_message`] before the SDK reads it.
/// Returns when the client closes its side, once every answer is written
/// (or [`DRAIN`] later, the rest dropped, if the client stops reading).
pub async fn serve_stdio(server: CairnMcp) -> std::io::Result<()> {
    let other = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    let (mut to_sdk, sdk_input) = tokio::io::duplex(64 * 1024);
    let (sdk_output, from_sdk) = tokio::io::duplex(64 * 1024);
    // One writer owns stdout, so the SDK's answers and the gate's refusals
    // are written whole lines at a time, never interleaved. Unbounded, as
    // the SDK's own queue of answers is: what waits there is what the
    // client asked for and has not read yet. The writer is a thread of its
    // own, never joined, like the gate: a write to a client that stopped
    // reading cannot be cancelled, and must not hold the process.
    let (outgoing, mut to_write) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let (written, all_written) = tokio::sync::oneshot::channel::<std::io::Result<()>>();
    std::thread::Builder::new()
        .name("cairn-mcp-stdout".into())
        .spawn(move || {
            use std::io::Write as _;
            let mut stdout = std::io::stdout().lock();
            let mut result = Ok(());
            // An empty line is the end: every line queued before it is
            // written, and nothing after it (the gate may still be reading).
            while let Some(line) = to_write.blocking_recv() {
                if line.is_empty() {
                    break;
                }
                if let Err(e) = stdout.write_all(&line).and_then(|()| stdout.flush()) {
                    result = Err(e);
                    break;
                }
            }
            // Closing the channel tells the gate and the forwarder that no
            // answer can be written any more.
            drop(to_write);
            let _ = written.send(result);
        })?;
    let answers = outgoing.clone();
    let end = outgoing.clone();
    let forwarder = tokio::spawn(async move {
        let mut from_sdk = BufReader::new(from_sdk);
        loop {
            let mut line = Vec::new();
            if from_sdk.read_until(b'\n', &mut line).await? == 0 || answers.send(line).is_err() {
                return Ok::<(), std::io::Error>(());
            }
        }
    });
    // The gate reads stdin on a thread of its own, never joined: a read
    // still pending when the service ends (its handshake failed while the
    // client keeps stdin open) must not hold the process, and a runtime
    // cannot cancel a blocking read.
    let (to_forward, mut forwarded_in) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let feeder = tokio::spawn(async move {
        while let Some(line) = forwarded_in.recv().await {
            to_sdk.write_all(&line).await?;
        }
        // The gate is done: dropping `to_sdk` ends the SDK's input, which
        // ends the service.
        Ok::<(), std::io::Error>(())
    });
    std::thread::Builder::new()
        .name("cairn-mcp-stdin".into())
        .spawn(move || gate(&to_forward, &outgoing))?;
    // The service ends when its input does, or at once if its handshake
    // fails; either way the answers already queued are written before
    // this returns.
    let served = match server.serve((sdk_input, sdk_output)).await {
        Ok(service) => service.waiting().await.map(|_| ()).map_err(|e| other(&e)),
        Err(e) => Err(other(&e)),
    };
    feeder.abort();
    let forwarded = forwarder.await.map_err(|e| other(&e))?;
    // Every answer the SDK gave is queued: the end goes after them.
    let _ = end.send(Vec::new());
    match tokio::time::timeout(DRAIN, all_written).await {
        Ok(Ok(written)) => written?,
        Ok(Err(_)) => {}
        Err(_) => tracing::warn!(
            "the MCP client read no answer for {} s after the service ended; the answers left were dropped",
            DRAIN.as_secs()
        ),
    }
    forwarded?;
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], limit: usize) -> Vec<Option<Vec<u8>>> {
        let mut input = std::io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut input, limit).unwrap() {
            out.push(match line {
                Line::Text(text) => Some(text),
                Line::TooLong => None,
            });
        }
        out
    }

    /// Lines are cut at `\n` (a `\r` before it dropped), across reads
    /// smaller than a line; one over the limit is reported, not kept.
    #[test]
    fn lines_are_read_within_the_limit() {
        let got = lines(b"{\"a\":1}\r\nxyzxyzxyzxyz\n\nlast", 8);
        assert_eq!(
            got,
            vec![
                Some(b"{\"a\":1}".to_vec()),
                None,
                Some(Vec::new()),
                Some(b"last".to_vec())
            ]
        );
    }

    /// A request the strict reading refuses is answered by its id; a
    /// notification and a line that is not JSON are dropped.
    #[test]
    fn refused_messages_are_answered_by_their_id() {
        let duplicate = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","method":"x"}"#;
        let Verdict::Answer(answer) = judge(duplicate) else {
            panic!("a duplicate member must be answered");
        };
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], -32600);
        let marker = br#"{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"a":{"$serde_json::private::RawValue":"1"}}}"#;
        let Verdict::Answer(answer) = judge(marker) else {
            panic!("a reserved member name must be answered");
        };
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["id"], "q");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("$serde_json::private::RawValue")
        );
        assert!(matches!(
            judge(br#"{"jsonrpc":"2.0","method":"notifications/initialized","x":1,"x":2}"#),
            Verdict::Drop(_)
        ));
        assert!(matches!(judge(b"{not json"), Verdict::Drop(_)));
        // An id the lenient reading would alter, or that is no string or
        // number, is answered as null.
        for line in [
            br#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping","x":1,"x":1}"#
                .as_slice(),
            br#"{"jsonrpc":"2.0","id":{"$serde_json::private::RawValue":"77"},"method":"ping"}"#,
        ] {
            let Verdict::Answer(answer) = judge(line) else {
                panic!("must be answered");
            };
            let answer: Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(answer["id"], Value::Null, "{answer}");
        }
        assert!(matches!(
            judge(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Verdict::Pass
        ));
    }
}
