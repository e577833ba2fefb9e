//! What the server verifies and what it gives clients to verify, over a
//! real loopback socket: agent-signed steps checked at ingest, uploaded
//! bundles checked as bytes, and COSE receipts (inclusion, consistency)
//! that verify with the server key. (Moved from `http.rs`.)

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod api;
mod common;
use api::{call, seed_000, start, step};
use common::*;

use base64::Engine as _;
use cairn_core::commit::{
    AgentSignature, Openings, agent_key_id, signed_step_message, step_digest,
};
use cairn_core::ed25519_dalek::{Signer as _, SigningKey};
use cairn_core::record::Step;

#[test]
fn signed_steps_are_checked_at_ingest() {
    let server = start();
    let admin = server.admin.clone();
    let key = SigningKey::from_bytes(&[21; 32]);
    let registered = post(
        &server,
        "/v1/agent-keys",
        &admin,
        &json!({
            "agent_id": "analyst",
            "public_key": base64::engine::general_purpose::STANDARD.encode(key.verifying_key().as_bytes()),
        }),
    );
    assert_eq!(registered.status, 201, "{}", registered.text());
    let key_id = agent_key_id(&key.verifying_key());
    assert_eq!(registered.json()["key_id"], key_id);
    // The agent builds the step, computes its digest and signs it.
    let signed = |content: &str, signer: &SigningKey| {
        let created_at = cairn_store::now();
        let seed = [5u8; 32];
        let mut core = Step::new(
            "signed-0", "acme", "analyst", "signed", 0, "Decision", created_at,
        )
        .unwrap();
        core.content = Some(content.to_owned());
        core.signer_key_id = Some(key_id.clone());
        let digest = step_digest(&core, &Openings::from_seed(&seed));
        let sig = AgentSignature {
            key_id: key_id.clone(),
            signature: signer.sign(&signed_step_message(&digest)).to_bytes(),
        };
        json!({
            "session_id": "signed", "agent_id": "analyst", "step_type": "Decision", "content": content,
            "trace_id": "signed-0", "step_index": 0, "created_at": created_at.to_string(), "seed": hex::encode(seed),
            "signature": {"key_id": sig.key_id, "signature": base64::engine::general_purpose::STANDARD.encode(sig.signature)},
        })
    };
    let forged = post(
        &server,
        "/v1/steps",
        &admin,
        &signed("approve", &SigningKey::from_bytes(&[22; 32])),
    );
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (400, "bad_signature"),
        "{}",
        forged.text()
    );
    let mut tampered = signed("approve", &key);
    tampered["content"] = json!("approve twice");
    assert_eq!(
        post(&server, "/v1/steps", &admin, &tampered).code(),
        "bad_signature"
    );
    let good = post(&server, "/v1/steps", &admin, &signed("approve", &key));
    assert_eq!(good.status, 201, "{}", good.text());
    let replay = get(&server, "/v1/sessions/signed?verify=true", &admin).json();
    assert_eq!(replay["chain_valid"], true);
    assert_eq!(replay["steps"][0]["signature_key_id"], key_id);
}

/// An uploaded bundle is checked as bytes: a byte that is not UTF-8 fails
/// at its line, even where reading it lossily would restore the character
/// it replaced.
#[test]
fn uploads_are_checked_as_bytes() {
    let server = start();
    let odd = post(
        &server,
        "/v1/steps",
        &server.admin,
        &step("odd", "plan", "a \u{fffd} b"),
    );
    assert_eq!(odd.status, 201, "{}", odd.text());
    let bundle = get(&server, "/v1/export?session=odd", &server.admin).body;
    let at = bundle
        .windows(3)
        .position(|w| w == "\u{fffd}".as_bytes())
        .unwrap();
    let checked = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        Some(&server.admin),
        Some(&bundle),
    )
    .json();
    assert_eq!(checked["verified"], true, "{checked}");
    let mut swapped = bundle.clone();
    swapped.splice(at..at + 3, [0xff]);
    assert_eq!(String::from_utf8_lossy(&swapped).as_bytes(), &bundle[..]);
    let checked = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        Some(&server.admin),
        Some(&swapped),
    )
    .json();
    assert_eq!(checked["brokenReason"], "malformed-record", "{checked}");
}

/// A trusted checkpoint that is no checkpoint note at all is the
/// caller's mistake, 400 `invalid_checkpoint` (field `checkpoint`), for an
/// uploaded bundle as for the store's verification; it had made a good
/// bundle's verdict `bad-signature`. A real note of this server is taken.
#[test]
fn a_trusted_checkpoint_must_be_a_checkpoint_note() {
    let server = start();
    let admin = server.admin.clone();
    seed_000(&server, &admin, "s1");
    let bundle = get(&server, "/v1/export?session=s1", &admin).body;
    let b64 = |text: &str| base64::engine::general_purpose::URL_SAFE.encode(text);
    let note = get(&server, "/v1/checkpoint", &admin).text();
    for (given, why) in [
        ("%%%".to_owned(), "not base64"),
        (b64("hello"), "no signed note"),
        (b64(""), "no signed note"),
        (
            base64::engine::general_purpose::STANDARD.encode([0xff, 0xfe]),
            "not text",
        ),
    ] {
        for path in ["/v1/bundles/verify", "/v1/verify"] {
            let (method, body) = if path == "/v1/verify" {
                ("GET", None)
            } else {
                ("POST", Some(&bundle[..]))
            };
            let reply = call(
                &server,
                method,
                &format!("{path}?checkpoint={given}"),
                Some(&admin),
                body,
            );
            assert_eq!(reply.status, 400, "{path} {given}: {}", reply.text());
            let error = &reply.json()["error"];
            assert_eq!(
                (error["code"].as_str(), error["field"].as_str()),
                (Some("invalid_checkpoint"), Some("checkpoint")),
                "{path} {given}: {error}"
            );
            assert!(error["message"].as_str().unwrap().contains(why), "{error}");
        }
    }
    let trusted = call(
        &server,
        "POST",
        &format!("/v1/bundles/verify?checkpoint={}", b64(&note)),
        Some(&admin),
        Some(&bundle),
    );
    assert_eq!(trusted.json()["verified"], true, "{}", trusted.text());
}

#[test]
fn cose_receipts_verify_with_the_server_key() {
    use cairn_core::receipt::{
        MEDIA_TYPE_COSE, MEDIA_TYPE_SCITT_RECEIPT, verify_consistency_receipt,
        verify_inclusion_receipt,
    };
    let server = start();
    let admin = server.admin.clone();
    seed_000(&server, &admin, "s1");
    let note = get(&server, "/v1/checkpoint", &admin).text();
    let origin = format!("{}/acme", server.store.server_name());
    let key = server.store.server_key().clone();
    let cp = cairn_core::checkpoint::verify_checkpoint(&note, &origin, std::slice::from_ref(&key))
        .unwrap();
    let (size, root) = (cp.checkpoint().size, cp.checkpoint().root);
    assert!(size >= 5, "session start and four steps");
    let mut leaves = Vec::new();
    server
        .store
        .read_log("acme", 0, size, &mut |e| {
            leaves.push(e.entry.unwrap().leaf_hash());
            true
        })
        .unwrap();

    // Every record's inclusion receipt against the checkpoint, and one
    // against an older size.
    for (seq, leaf) in leaves.iter().enumerate() {
        let reply = get(
            &server,
            &format!("/v1/receipts/inclusion?seq={seq}"),
            &admin,
        );
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.content_type, MEDIA_TYPE_COSE);
        let v = verify_inclusion_receipt(&reply.body, &key, leaf, Some(&root)).unwrap();
        assert_eq!((v.leaf_index, v.tree_size), (seq as u64, size));
        assert_eq!(v.issuer, origin);
    }
    let old_root = server.store.root_at("acme", 3).unwrap();
    let reply = get(&server, "/v1/receipts/inclusion?seq=1&size=3", &admin);
    verify_inclusion_receipt(&reply.body, &key, &leaves[1], Some(&old_root)).unwrap();
    // The wrong leaf, or a changed byte, does not verify.
    assert!(verify_inclusion_receipt(&reply.body, &key, &leaves[2], None).is_err());
    let mut altered = reply.body.clone();
    let last = altered.len() - 1;
    altered[last] ^= 1;
    assert!(verify_inclusion_receipt(&altered, &key, &leaves[1], None).is_err());

    // Consistency from size 3 to the checkpoint.
    let reply = get(&server, "/v1/receipts/consistency?old=3", &admin);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let v = verify_consistency_receipt(&reply.body, &key, &old_root, Some(&root)).unwrap();
    assert_eq!((v.old_size, v.new_size), (3, size));

    // Accept picks the SCITT media type.
    let scitt = raw(
        server.addr,
        &format!(
            "GET /v1/receipts/consistency?old=2&new=4 HTTP/1.1\r\nHost: localhost\r\n\
             Authorization: Bearer {admin}\r\nAccept: application/json, {MEDIA_TYPE_SCITT_RECEIPT};q=0.9"
        ),
        b"",
    );
    assert_eq!(scitt.status, 200);
    assert_eq!(scitt.header("content-type"), Some(MEDIA_TYPE_SCITT_RECEIPT));
    let root2 = server.store.root_at("acme", 2).unwrap();
    let root4 = server.store.root_at("acme", 4).unwrap();
    verify_consistency_receipt(&scitt.body, &key, &root2, Some(&root4)).unwrap();

    // Errors in the shared shape.
    for (path, status, code) in [
        ("/v1/receipts/inclusion", 400, "missing_field"),
        ("/v1/receipts/inclusion?seq=x", 400, "invalid_argument"),
        ("/v1/receipts/inclusion?seq=999", 404, "not_found"),
        (
            "/v1/receipts/inclusion?seq=3&size=3",
            400,
            "invalid_argument",
        ),
        (
            "/v1/receipts/inclusion?seq=1&size=999",
            400,
            "invalid_argument",
        ),
        ("/v1/receipts/inclusion?seq=1&sise=3", 400, "unknown_field"),
        ("/v1/receipts/consistency?old=0", 400, "invalid_argument"),
        (
            "/v1/receipts/consistency?old=4&new=4",
            400,
            "invalid_argument",
        ),
        ("/v1/receipts/consistency?old=2&new=999", 404, "not_found"),
    ] {
        let reply = get(&server, path, &admin);
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (status, code),
            "{path}"
        );
        // A sentence is not followed by "not found" (it read "entry 999
        // in a log of size 4 (...) not found").
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(!message.ends_with(") not found"), "{path}: {message}");
        // An argument's refusal names it, as the proofs' do.
        if code == "invalid_argument" || code == "missing_field" {
            assert!(
                reply.json()["error"]["field"].is_string(),
                "{path}: {}",
                reply.text()
            );
        }
    }
    // Another org sees nothing of acme's log.
    let other = key_for(&server, "globex", Role::Admin, None);
    assert_eq!(
        get(&server, "/v1/receipts/inclusion?seq=0", &other).status,
        404
    );
    assert_eq!(
        get(&server, "/v1/receipts/consistency?old=1", &other).status,
        404
    );
    assert_eq!(
        call(&server, "GET", "/v1/receipts/inclusion?seq=0", None, None).status,
        401
    );
}

/// An uploaded bundle verifies under the key it names unless keys are
/// given; the answer says whether the key was pinned and whether it is
/// this server's, so that a bundle another server signed is not taken
/// for one this server vouches for.
#[test]
fn uploaded_bundles_say_whose_key_signed_them() {
    let ours = start();
    let theirs = start();
    seed_000(&ours, &ours.admin, "s1");
    seed_000(&theirs, &theirs.admin, "s1");
    let their_bundle = get(&theirs, "/v1/export?session=s1", &theirs.admin).body;
    let our_bundle = get(&ours, "/v1/export?session=s1", &ours.admin).body;
    let check = |bundle: &[u8], query: &str| {
        call(
            &ours,
            "POST",
            &format!("/v1/bundles/verify{query}"),
            Some(&ours.admin),
            Some(bundle),
        )
        .json()
    };
    let ours_checked = check(&our_bundle, "");
    assert_eq!(
        (
            &ours_checked["verified"],
            &ours_checked["key_pinned"],
            &ours_checked["signed_by_this_server"]
        ),
        (&json!(true), &json!(false), &json!(true)),
        "{ours_checked}"
    );
    let theirs_checked = check(&their_bundle, "");
    assert_eq!(
        (
            &theirs_checked["verified"],
            &theirs_checked["signed_by_this_server"]
        ),
        (&json!(true), &json!(false)),
        "{theirs_checked}"
    );
    let their_key = theirs.store.server_key().to_string();
    // Their bundle whose header names our key first and theirs among its
    // log keys: it verifies (their key signed it), under their key.
    let text = String::from_utf8(their_bundle.clone()).unwrap();
    let (header, rest) = text.split_once('\n').unwrap();
    let mut header: Value = serde_json::from_str(header).unwrap();
    header["server_key"] = json!(ours.store.server_key().to_string());
    header["log_keys"] = json!([their_key.clone()]);
    let forged = format!("{header}\n{rest}");
    let forged_checked = check(forged.as_bytes(), "");
    assert_eq!(
        (
            &forged_checked["verified"],
            &forged_checked["server_key"],
            &forged_checked["signed_by_this_server"]
        ),
        (&json!(true), &json!(their_key), &json!(false)),
        "{forged_checked}"
    );
    let pinned = check(
        &their_bundle,
        &format!("?key={}", percent_encode(&their_key)),
    );
    assert_eq!(
        (
            &pinned["verified"],
            &pinned["key_pinned"],
            &pinned["signed_by_this_server"]
        ),
        (&json!(true), &json!(true), &json!(false)),
        "{pinned}"
    );
}

/// This server's own session bundle, its session's last step dropped and
/// its selection re-signed by a key the courier added to the header's log
/// keys: whatever the verdict, this server does not vouch for it (its key
/// signed the checkpoint, not the selection that says what the bundle
/// holds).
#[test]
fn a_selection_re_signed_by_another_key_is_not_vouched_for() {
    use cairn_core::note::NoteSigner;
    use cairn_core::selection::Selection;
    let ours = start();
    seed_000(&ours, &ours.admin, "s1");
    let bundle = String::from_utf8(get(&ours, "/v1/export?session=s1", &ours.admin).body).unwrap();
    let mut lines: Vec<Value> = bundle
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let steps: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i]["type"] == "step")
        .collect();
    assert!(steps.len() >= 2, "{bundle}");
    let (last, kept) = (steps[steps.len() - 1], steps[steps.len() - 2]);
    let new_head = cairn_core::Hash::from_hex(lines[kept]["hash"].as_str().unwrap()).unwrap();
    lines.remove(last);
    // Another key of the log's name (a key of another name signs nothing
    // of this log, FORMAT 10.2).
    let log_name = ours.store.server_key().name().to_owned();
    let mallory = NoteSigner::from_seed(&log_name, &[7; 32]).unwrap();
    let mallory_key = mallory.verifier().to_string();
    lines[0]["log_keys"] = json!([ours.store.server_key().to_string(), mallory_key]);
    let checkpoint_text = lines
        .iter()
        .find_map(|l| l["checkpoint"].as_str())
        .unwrap()
        .to_owned();
    let origin = lines[0]["origin"].as_str().unwrap().to_owned();
    let root_b64 = checkpoint_text.lines().nth(2).unwrap();
    let root = cairn_core::Hash::from_base64(root_b64).unwrap();
    for line in &mut lines {
        if line.get("selection").is_some() {
            let mut selection = Selection::from_value(&line["selection"]).unwrap();
            let claim = &mut selection.sessions[0];
            claim.steps -= 1;
            claim.head = new_head;
            line["note"] = json!(selection.sign(&mallory, &origin, &root).unwrap());
            line["selection"] = selection.to_value();
        }
        if let Some(entries) = line["end"]["entries"].as_u64() {
            line["end"]["entries"] = json!(entries - 1);
        }
    }
    let forged: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let checked = call(
        &ours,
        "POST",
        "/v1/bundles/verify",
        Some(&ours.admin),
        Some(forged.as_bytes()),
    )
    .json();
    // Under the keys it names it verifies (the forgery is well made), with
    // this server's key on the checkpoint: only the selection's signer
    // tells it apart.
    assert_eq!(
        (
            &checked["verified"],
            &checked["server_key"],
            &checked["signed_by_this_server"]
        ),
        (
            &json!(true),
            &json!(ours.store.server_key().to_string()),
            &json!(false)
        ),
        "{checked}"
    );
    // Pinned to this server's key, the forged selection does not verify.
    let pinned = call(
        &ours,
        "POST",
        &format!(
            "/v1/bundles/verify?key={}",
            percent_encode(&ours.store.server_key().to_string())
        ),
        Some(&ours.admin),
        Some(forged.as_bytes()),
    )
    .json();
    assert_eq!(
        (&pinned["verified"], &pinned["signed_by_this_server"]),
        (&json!(false), &json!(false)),
        "{pinned}"
    );
    // The untouched bundle is this server's.
    let genuine = call(
        &ours,
        "POST",
        "/v1/bundles/verify",
        Some(&ours.admin),
        Some(bundle.as_bytes()),
    )
    .json();
    assert_eq!(genuine["signed_by_this_server"], json!(true), "{genuine}");
}

/// `GET /v1/agent-keys` lists the key records a page at a time, in log
/// order, with a Link to the next page when one is full (an org may
/// register keys without end: the whole list had been built in memory);
/// a key bound to an agent pages through its agent's records only.
#[test]
fn agent_key_records_are_listed_a_page_at_a_time() {
    let server = start();
    let admin = server.admin.clone();
    let register = |agent: &str, seed: u8| {
        let key = SigningKey::from_bytes(&[seed; 32]);
        let public =
            base64::engine::general_purpose::STANDARD.encode(key.verifying_key().as_bytes());
        let r = post(
            &server,
            "/v1/agent-keys",
            &admin,
            &json!({"agent_id": agent, "public_key": public}),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["key_id"].as_str().unwrap().to_owned()
    };
    let mut analyst = Vec::new();
    for seed in 40..45 {
        analyst.push(register("analyst", seed));
        register("other", seed + 20);
    }
    let revoked = post(
        &server,
        &format!("/v1/agent-keys/{}/revoke", analyst[0]),
        &admin,
        &json!({"agent_id": "analyst", "reason": "rotated"}),
    );
    assert_eq!(revoked.status, 200, "{}", revoked.text());

    let api = |path: &str, token: &str| {
        raw(
            server.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}"),
            b"",
        )
    };
    // Follows the Link headers from `path`, two records a page.
    let pages = |token: &str, path: &str| {
        let mut seen: Vec<Value> = Vec::new();
        let mut next = Some(path.to_owned());
        let mut pages = 0;
        while let Some(path) = next.take() {
            let page = api(&path, token);
            assert_eq!(page.status, 200, "{}", String::from_utf8_lossy(&page.body));
            let keys = page.json()["keys"].as_array().unwrap().clone();
            assert!(keys.len() <= 2);
            seen.extend(keys);
            next = page.header("link").map(|link| {
                let (target, rel) = link.split_once("; ").unwrap();
                assert_eq!(rel, "rel=\"next\"");
                target.trim_matches(['<', '>']).to_owned()
            });
            pages += 1;
        }
        (seen, pages)
    };
    let (all, count) = pages(&admin, "/v1/agent-keys?limit=2");
    assert_eq!(all.len(), 11);
    assert_eq!(count, 6, "five full pages, then the last one");
    let seqs: Vec<u64> = all.iter().map(|k| k["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(all[10]["type"], "key-revocation");
    let whole = api("/v1/agent-keys", &admin);
    assert_eq!(whole.json()["keys"].as_array().unwrap().len(), 11);
    assert!(whole.header("link").is_none());
    let after = get(
        &server,
        &format!("/v1/agent-keys?after={}", seqs[8]),
        &admin,
    );
    assert_eq!(after.json()["keys"].as_array().unwrap().len(), 2);

    let bound = key_for(&server, "acme", Role::Writer, Some("analyst"));
    let (own, _) = pages(&bound, "/v1/agent-keys?limit=2");
    assert_eq!(own.len(), 6, "five registrations and a revocation");
    assert!(own.iter().all(|k| k["agent_id"] == "analyst"));

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=abc", "limit"),
        // A second spelling of a number is refused (`u64::from_str`
        // takes a leading `+`).
        ("limit=%2B5", "limit"),
        ("after=%2B1", "after"),
        ("after=-1", "after"),
        ("after=9223372036854775808", "after"),
        ("cursor=1", "cursor"),
    ] {
        let refused = get(&server, &format!("/v1/agent-keys?{query}"), &admin);
        assert_eq!(refused.status, 400, "{query}: {}", refused.text());
        assert_eq!(
            refused.json()["error"]["field"],
            field,
            "{query}: {}",
            refused.text()
        );
    }
}

/// A Markdown replay has no place for a verdict in its text (seed 002's):
/// `verify=true` carries it in headers, `false` with the reason and the
/// failing step once the store was tampered with. A level the caller may
/// not see is refused before any verification is spent on the request.
#[test]
fn a_markdown_replay_carries_its_verdict_in_headers() {
    let server = start();
    let admin = server.admin.clone();
    for i in 0..3 {
        let reply = post(
            &server,
            "/v1/steps",
            &admin,
            &step("s1", "observation", &format!("step {i}")),
        );
        assert_eq!(reply.status, 201);
    }
    let markdown = |token: &str, query: &str| {
        raw(
            server.addr,
            &format!(
                "GET /v1/sessions/s1?format=markdown{query} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}"
            ),
            b"",
        )
    };
    let verified = markdown(&admin, "&verify=true");
    assert_eq!(verified.status, 200);
    assert_eq!(verified.header("cairn-chain-valid"), Some("true"));
    assert_eq!(verified.header("cairn-verdict-reason"), None);
    assert!(String::from_utf8_lossy(&verified.body).contains("step 1"));
    let unverified = markdown(&admin, "");
    assert_eq!(unverified.header("cairn-chain-valid"), None);
    let verifications = || {
        let metrics = cairn_testkit::http::call(server.addr, "GET", "/metrics", None, None).text();
        metrics
            .lines()
            .filter(|l| l.starts_with("cairn_verifications_total"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // A reader asking for full detail: refused, and nothing verified.
    let reader = key_for(&server, "acme", Role::Reader, None);
    let before = verifications();
    assert!(before.iter().any(|l| l.ends_with(" 1")), "{before:?}");
    let refused = get(&server, "/v1/sessions/s1?verify=true&level=full", &reader);
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert_eq!(verifications(), before);
    // An insider edits step 1's content in the database.
    insider_edits_content(&server, "step 1", "edited");
    let tampered = markdown(&admin, "&verify=true");
    assert_eq!(tampered.status, 200);
    assert_eq!(tampered.header("cairn-chain-valid"), Some("false"));
    assert_eq!(
        tampered.header("cairn-verdict-reason"),
        Some("digest-mismatch")
    );
    assert_eq!(tampered.header("cairn-verdict-step-index"), Some("1"));
    assert!(tampered.header("cairn-verdict-seq").is_some());
    assert!(String::from_utf8_lossy(&tampered.body).contains("edited"));
}
