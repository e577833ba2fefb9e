//! Export bundles as an auditor's verifier reads them (`cairn verify
//! --bundle`, `POST /v1/bundles/verify`, the import's first pass): line by
//! line into the streaming `BundleVerifier`, with the header's server key
//! (so that real bundles in the seed corpus verify deep) and, when the input
//! starts with one, a trusted checkpoint. Every line is also decoded on its
//! own as an entry, and the typed decoder of step lines is held to the
//! general one (`assert_fast_agrees`: whenever it answers, the same to the
//! bit), and a line the canonical-JSON check accepts must be its value's
//! canonical JSON (what a store verifier relies on to commit stored JSON
//! text unparsed). Nothing may panic, whatever the bytes.
#![no_main]

use cairn_core::bundle::{BundleVerifier, assert_fast_agrees, bundle_lines, decode_entry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // An optional first part, up to a NUL byte, is a checkpoint the
    // auditor trusts.
    let (trusted, bundle) = match data.iter().position(|&b| b == 0) {
        Some(at) => (Some(&data[..at]), &data[at + 1..]),
        None => (None, data),
    };
    let mut verifier = BundleVerifier::new(Vec::new());
    if let Some(note) = trusted.and_then(|t| std::str::from_utf8(t).ok()) {
        verifier.trust_checkpoint(note);
    }
    for line in bundle_lines(bundle) {
        assert_fast_agrees(line);
        if let Ok(text) = std::str::from_utf8(line) {
            let _ = decode_entry(text);
            if cairn_core::jcs::CanonicalJson::new(text).is_some() {
                let value: serde_json::Value =
                    serde_json::from_str(text).expect("accepted as canonical JSON, yet not JSON");
                assert_eq!(
                    cairn_core::jcs::to_vec(&value),
                    text.as_bytes(),
                    "accepted as canonical JSON, yet not its value's"
                );
            }
        }
        if !verifier.push_bytes(line) {
            break;
        }
    }
    let verdict = verifier.finish();
    // A failing verdict names a reason; a passing one has none.
    assert_eq!(verdict.verdict.verified, verdict.verdict.failure.is_none());
});
