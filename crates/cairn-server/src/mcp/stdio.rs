//! MCP over stdio (`cairn mcp`), read as strictly as `/mcp` reads a
//! request body.
//!
//! The MCP SDK reads each line with plain serde_json, which keeps the last
//! of two members with one name, turns an integer beyond 64 bits into a
//! float, and reads an object holding one of its private marker names
//! (`$serde_json::private::…`) as another value. So every line from the
//! client passes [`check_message`] first, as every `/mcp` body does: a
//! line that fails it never reaches the SDK, and the client gets a
//! JSON-RPC error answering its request (`-32600`, the message saying
//! what to change), or nothing for a notification, whose sender expects
//! no answer. A line that is not JSON at all is dropped, as the SDK and
//! the other official SDKs drop it (an answer could start an error storm
//! with a peer that echoes it). A line longer than [`MAX_LINE_BYTES`] (the
//! SDK's own limit) is not held in memory: it is answered with an error
//! whose id is null, since its id was not kept.

use super::CairnMcp;
use rmcp::ServiceExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The longest line read (16 MiB, the limit the MCP SDK's stdio reader
/// has itself).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Checks one MCP message as it arrives, before the MCP SDK reads it:
/// strict JSON (no member twice in an object, integers within 64 bits)
/// and no member name that serde_json reserves. Gives the message, or what
/// is wrong with it.
pub fn check_message(bytes: &[u8]) -> Result<Value, String> {
    let message = cairn_core::json::from_slice_with(bytes, cairn_core::json::Integers::Bits64)
        .map_err(|e| format!("the message is not valid JSON: {e}"))?;
    if let Some(name) = cairn_core::json::reserved_member_name(&message) {
        return Err(format!(
            "the message has a member named {:?}: names starting with `$serde_json::private::` are reserved by the JSON library and would be read as another value; rename the member",
            name.chars().take(60).collect::<String>()
        ));
    }
    Ok(message)
}

/// One line of the client's input.
enum Line {
    /// A whole line, without its end.
    Text(Vec<u8>),
    /// A line longer than the limit (dropped as it was read).
    TooLong,
}

/// Reads one line of at most `limit` bytes without holding more than
/// that in memory; `None` at the end of the input.
async fn read_line(
    input: &mut (impl AsyncBufRead + Unpin),
    limit: usize,
) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
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
    // The request id, read leniently: a request the strict reading refuses
    // is still answered by its id.
    let id = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(message)) => match message.get("id") {
            Some(id) if message.contains_key("method") => id.clone(),
            // A notification (no id) expects no answer.
            _ if message.contains_key("method") => {
                return Verdict::Drop(format!("a notification was refused: {problem}"));
            }
            _ => return Verdict::Drop(format!("a message was refused: {problem}")),
        },
        Ok(_) => Value::Null,
        Err(_) => return Verdict::Drop(format!("a line that is not JSON was dropped: {problem}")),
    };
    Verdict::Answer(error_line(id, &problem))
}

/// Serves `server` on this process's standard input and output, every
/// line of input checked by [`check_message`] before the SDK reads it.
/// Returns when the client closes its side, once every answer is written.
pub async fn serve_stdio(server: CairnMcp) -> std::io::Result<()> {
    let max_line = MAX_LINE_BYTES;
    let other = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    let (mut to_sdk, sdk_input) = tokio::io::duplex(64 * 1024);
    let (sdk_output, from_sdk) = tokio::io::duplex(64 * 1024);
    // One writer owns stdout, so the SDK's answers and the gate's refusals
    // are written whole lines at a time, never interleaved.
    let (outgoing, mut to_write) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = to_write.recv().await {
            stdout.write_all(&line).await?;
            stdout.flush().await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let answers = outgoing.clone();
    let forwarder = tokio::spawn(async move {
        let mut from_sdk = BufReader::new(from_sdk);
        loop {
            let mut line = Vec::new();
            if from_sdk.read_until(b'\n', &mut line).await? == 0
                || answers.send(line).await.is_err()
            {
                return Ok::<(), std::io::Error>(());
            }
        }
    });
    let gate = tokio::spawn(async move {
        let mut stdin = BufReader::new(tokio::io::stdin());
        while let Some(line) = read_line(&mut stdin, max_line).await? {
            let line = match line {
                Line::Text(line) => line,
                Line::TooLong => {
                    let problem = format!("the message is longer than {max_line} bytes");
                    if outgoing
                        .send(error_line(Value::Null, &problem))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    continue;
                }
            };
            match judge(&line) {
                Verdict::Pass => {
                    to_sdk.write_all(&line).await?;
                    to_sdk.write_all(b"\n").await?;
                }
                Verdict::Answer(answer) => {
                    if outgoing.send(answer).await.is_err() {
                        break;
                    }
                }
                Verdict::Drop(why) => tracing::warn!("{why}"),
            }
        }
        // Dropping `to_sdk` ends the SDK's input, which ends the service.
        Ok::<(), std::io::Error>(())
    });
    let service = server
        .serve((sdk_input, sdk_output))
        .await
        .map_err(|e| other(&e))?;
    let served = service.waiting().await.map_err(|e| other(&e));
    gate.abort();
    let forwarded = forwarder.await.map_err(|e| other(&e))?;
    writer.await.map_err(|e| other(&e))??;
    forwarded?;
    served.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], limit: usize) -> Vec<Option<Vec<u8>>> {
        let mut input = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut input, limit).await.unwrap() {
            out.push(match line {
                Line::Text(text) => Some(text),
                Line::TooLong => None,
            });
        }
        out
    }

    /// Lines are cut at `\n` (a `\r` before it dropped), across reads
    /// smaller than a line; one over the limit is reported, not kept.
    #[tokio::test]
    async fn lines_are_read_within_the_limit() {
        let got = lines(b"{\"a\":1}\r\nxyzxyzxyzxyz\n\nlast", 8).await;
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
        assert!(matches!(
            judge(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Verdict::Pass
        ));
    }
}
