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
