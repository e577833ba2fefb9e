//! Seed 004's complete traces as `POST /v1/traces` and MCP `import_trace`
//! read them: strict JSON, then the trace, its signed payload and a
//! signature check. Nothing may panic.
#![no_main]

use cairn_core::ed25519_dalek::SigningKey;
use cairn_core::trace::CompleteTrace;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = cairn_wire::wire::parse_strict(data) else {
        return;
    };
    let Ok(trace) = CompleteTrace::parse(&value) else {
        return;
    };
    let payload = trace.signed_payload();
    // The signed payload is canonical JSON: it parses back.
    let _: serde_json::Value =
        serde_json::from_slice(&payload).expect("a signed payload that is not JSON");
    let key = SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    let _ = trace.verify(&key);
});
