//! What a request holds in memory beside its body: a turn's steps, a
//! thinking text's parsed answer, a signed trace's copies, a batch's
//! prepared steps are counted on the request's own count, so that a
//! request alone always goes through however much it builds.

use super::common::*;

/// A turn whose steps (with the sequencer's copies) are counted past an
/// org's half of the budget is recorded when nothing else is held: its
/// steps were once counted as another request's beside its own body, and
/// such a turn was refused with 503 for ever, however often retried.
#[test]
fn a_turn_alone_goes_through_however_much_it_builds() {
    let server = start(config(Limits::default()));
    let admin = server.admin.clone();
    let edges: Vec<Value> = (0..30_000).map(|i| json!([i % 97, (i * 7) % 89])).collect();
    let step = json!({"step_type": "tool_call", "output_data": {"edges": edges}});
    let body = json!({"agent_id": "analyst", "turn_id": "t", "steps": vec![step; 7]});
    let reply = post(&server, "/v1/sessions/big/turns", &admin, &body);
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.json()["accepted"], 7, "{}", reply.text());
}

/// A client that sends its next request as soon as it has the answer to
/// the last one, on one keep-alive connection, is never refused for what
/// the last one held: a request's count is given back (by the handler, and
/// by its queued writes once they are committed) before its answer is
/// sent. A review had 12 of 20 such back-to-back batches, each counted
/// past an org's half, refused when queued writes let go of their count
/// only after the answer.
#[test]
fn back_to_back_requests_each_go_through_alone() {
    let server = start(config(Limits::default()));
    let heavy: Vec<Value> = (0..30_000).map(|_| json!({"a": 0})).collect();
    let batch: Vec<Value> = (0..4)
        .map(|i| {
            let mut step = step("heavy", "a", "plan", &format!("step {i}"));
            step["metadata"] = json!({"heavy": heavy});
            step
        })
        .collect();
    let body = serde_json::to_vec(&batch).unwrap();
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    for round in 0..16 {
        let mut request = format!(
            "POST /v1/steps/batch HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            server.admin,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&body);
        stream.write_all(&request).unwrap();
        let (status, answer) = keep_alive_answer(&mut stream);
        assert_eq!(status, 200, "round {round}: {answer}");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["accepted"], 4, "round {round}: {answer}");
    }
}

/// One answer read from a kept-alive connection (its body sized by
/// `Content-Length`): its status and body.
fn keep_alive_answer(stream: &mut TcpStream) -> (u16, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no Content-Length in {head}"));
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}
