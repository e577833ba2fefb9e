//! C2SP signed notes and tlog checkpoints as a verifier reads them from a
//! bundle, a witness or `cairn verify --checkpoint`: parse, open against a
//! key, parse the checkpoint body, check cosignatures, read vkeys. Nothing
//! may panic, and nothing verifies that was not signed by the key.
#![no_main]

use cairn_core::checkpoint::{Checkpoint, verify_checkpoint, verify_cosignature};
use cairn_core::note::{Note, NoteSigner, NoteVerifier, open};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let signer = NoteSigner::from_seed("cairn.fuzz", &[3u8; 32]).expect("a signer");
    let known = [signer.verifier()];
    let _ = Note::parse(text);
    if let Ok(body) = open(text, &known) {
        // A note that opens starts with the text it signs.
        assert!(text.starts_with(&body), "opened a body the note does not start with");
    }
    let _ = Checkpoint::parse(text);
    let _ = verify_checkpoint(text, "cairn.fuzz/acme", &known);
    let _ = verify_cosignature(text, &known[0]);
    for line in text.lines().take(4) {
        let _ = NoteVerifier::parse(line);
        let _ = NoteSigner::parse(line);
    }
});
