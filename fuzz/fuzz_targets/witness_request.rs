//! C2SP tlog-witness `add-checkpoint` requests as a witness reads them
//! (`POST /add-checkpoint`, `cairn_core::witness`): the body as sent, and
//! a request built from a real tree whose proof, sizes and root the input
//! alters, its checkpoint signed by the log's key so that the fuzzer
//! reaches the consistency check. Nothing may panic; nothing is accepted
//! that a signature or a proof does not support: an altered proof or root
//! never extends what the witness cosigned, and what is accepted is the
//! checkpoint's own size and root.
#![no_main]

use cairn_core::Hash;
use cairn_core::checkpoint::Checkpoint;
use cairn_core::merkle::{MemoryTree, consistency_proof, leaf_hash};
use cairn_core::note::NoteSigner;
use cairn_core::witness::{Witnessed, check_consistency, check_request};
use libfuzzer_sys::fuzz_target;

const ORIGIN: &str = "cairn.fuzz/acme";

fuzz_target!(|data: &[u8]| {
    let signer = NoteSigner::from_seed(ORIGIN, &[5u8; 32]).expect("a signer");
    let keys = |origin: &str| (origin == ORIGIN).then(|| vec![signer.verifier()]);

    // The body as sent: parsed and checked against a witness that has
    // cosigned nothing and one that holds size 3 of some tree.
    if let Ok(body) = std::str::from_utf8(data)
        && let Ok((request, checkpoint, _)) = check_request(body, keys)
    {
        // Accepted only when the log's key signed it (the fuzzer cannot
        // sign): reached with the committed seeds.
        for latest in [
            None,
            Some(Witnessed {
                size: 3,
                root: Hash([7; 32]),
                log_keys: None,
            }),
            Some(Witnessed {
                size: 3,
                root: Hash([7; 32]),
                log_keys: Some(2),
            }),
        ] {
            if let Ok(w) = check_consistency(&request, &checkpoint, latest.as_ref()) {
                assert_eq!((w.size, w.root), (checkpoint.size, checkpoint.root));
                // A cosigned count never goes back (FORMAT.md 7.7).
                let before = latest.as_ref().and_then(|l| l.log_keys);
                assert!(before.is_none_or(|b| w.log_keys.is_some_and(|c| c >= b)));
            }
        }
    }

    // A request built from a real tree: the witness holds `old` leaves of
    // it, the log claims `new`; the input's bytes pick the sizes and what
    // to alter.
    let [old, new, alter, at, xor, rest @ ..] = data else {
        return;
    };
    let (old, new) = (u64::from(*old % 40), u64::from(*new % 40));
    let mut tree = MemoryTree::new();
    for i in 0..old.max(new) {
        tree.push(leaf_hash(&i.to_be_bytes()));
    }
    let mut proof = if old >= 1 && old <= new {
        consistency_proof(&tree, old, new).expect("a proof within the tree")
    } else {
        Vec::new()
    };
    let mut root = tree.root_at(new);
    let altered = match alter % 5 {
        1 if !proof.is_empty() => {
            let line = usize::from(*at) % proof.len();
            proof[line].0[usize::from(*xor) % 32] ^= 1 | *xor;
            true
        }
        2 if !proof.is_empty() => {
            proof.remove(usize::from(*at) % proof.len());
            true
        }
        3 => {
            let extra: [u8; 32] = std::array::from_fn(|i| rest.get(i).copied().unwrap_or(0));
            proof.insert(usize::from(*at) % (proof.len() + 1), Hash(extra));
            true
        }
        4 => {
            root.0[usize::from(*xor) % 32] ^= 1 | *xor;
            true
        }
        _ => false,
    };
    let checkpoint = Checkpoint {
        origin: ORIGIN.to_owned(),
        size: new,
        root,
        extensions: Vec::new(),
    };
    let Ok(note) = checkpoint.sign(&signer) else {
        return;
    };
    let mut body = format!("old {old}\n");
    for hash in &proof {
        body.push_str(&hash.to_base64());
        body.push('\n');
    }
    body.push('\n');
    body.push_str(&note);
    let latest = (old > 0).then(|| Witnessed {
        size: old,
        root: tree.root_at(old),
        log_keys: None,
    });
    let checked = check_request(&body, keys)
        .and_then(|(request, parsed, _)| check_consistency(&request, &parsed, latest.as_ref()));
    match checked {
        Ok(w) => {
            assert_eq!((w.size, w.root), (new, root));
            // An extension of what the witness holds: the true tree's root
            // (an altered root extends nothing, except where nothing was
            // held: from size 0 any signed tree is a first checkpoint).
            if old > 0 {
                assert!(!altered, "accepted an altered request: {body}");
                assert!(old <= new);
            }
        }
        Err(e) => {
            // The request as the real tree gives it is accepted.
            assert!(
                altered || old > new || (old == 0 && !proof.is_empty()),
                "refused a true extension from {old} to {new}: {e}"
            );
        }
    }
});
