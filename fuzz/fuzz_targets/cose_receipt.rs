//! COSE receipts (RFC 9942) as a verifier reads them from a server, an
//! export's receipts directory or `cairn receipt verify`: decode, then
//! verify as inclusion and as consistency. Nothing may panic, and nothing
//! verifies that was not signed by the key.
#![no_main]

use cairn_core::merkle::leaf_hash;
use cairn_core::note::NoteSigner;
use cairn_core::receipt::{Receipt, ReceiptProof};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let signer = NoteSigner::from_seed("cairn.fuzz", &[3u8; 32]).expect("a signer");
    let key = signer.verifier();
    let Ok(receipt) = Receipt::decode(data) else {
        return;
    };
    let leaf = leaf_hash(b"fuzz");
    // Fuzzed bytes carry no signature by this key over any root.
    assert!(receipt.verify_inclusion(&key, &leaf, None).is_err());
    assert!(receipt.verify_consistency(&key, &leaf, None).is_err());
    match receipt.proof() {
        ReceiptProof::Inclusion { path, .. } | ReceiptProof::Consistency { path, .. } => {
            assert!(path.len() <= data.len() / 32);
        }
    }
});
