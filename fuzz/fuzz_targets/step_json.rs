//! A step as the server reads it off the wire: strict JSON, the step
//! object, then validation and hashing as the ledger prepares it. Nothing
//! may panic; what the strict parser accepts, serde_json reads the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = cairn_wire::wire::parse_strict(data) else {
        return;
    };
    // Differential: strict parsing only refuses, never reads differently.
    let plain: serde_json::Value =
        serde_json::from_slice(data).expect("strict JSON that serde_json refuses");
    assert_eq!(value, plain, "strict and plain JSON disagree");
    for agent in [Some("agent"), None] {
        let Ok(step) = cairn_wire::wire::step_from_json(value.clone(), "acme", agent, "fuzz") else {
            continue;
        };
        // What the ledger accepts has well-formed ids.
        if let Ok(prepared) =
            cairn_store::prepare_step(step, &cairn_core::record::Limits::default(), 0.1)
        {
            for (field, id) in [
                ("agent_id", &prepared.step.agent_id),
                ("session_id", &prepared.step.session_id),
            ] {
                assert!(
                    cairn_core::record::validate_id(field, id).is_ok(),
                    "accepted a malformed {field}"
                );
            }
        }
    }
    // A batch is an array of such objects.
    if let Some(items) = value.as_array() {
        for item in items.iter().take(16) {
            let _ = cairn_wire::wire::step_from_json(item.clone(), "acme", None, "fuzz");
        }
    }
});
