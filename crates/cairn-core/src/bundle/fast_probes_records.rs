//! Probes of the typed step-line decoder about what a line carries
//! (proofs, signatures, salts and hidden fields, links, spellings of
//! kinds and statuses, timestamps, missing members, stages, member order
//! and line ends): each states which decoder answers, and that they
//! agree. The probes of its syntax (escapes, duplicates, numbers, white
//! space, encodings, nesting) are in `fast_probes.rs`, with the helpers.

use super::*;

#[test]
fn probe_proofs() {
    let s = revealed();
    let h = hidden();
    let hash = Hash::sha256(b"a").to_hex();
    let list = |n: usize| vec![format!("\"{hash}\""); n].join(",");
    let proof = format!("\"proof\":[\"{hash}\",\"{}\"]", Hash::sha256(b"b").to_hex());
    for to in [
        "\"proof\":[]".to_owned(),
        format!("\"proof\":[{}]", list(128)),
        format!("\"proof\": [ {} ] ", list(3)),
    ] {
        fast_takes(sub(&s, &proof, &to).as_bytes());
    }
    for to in [
        format!("\"proof\":[{}]", list(129)),
        format!("\"proof\":[{}]", list(10_000)),
        "\"proof\":null".into(),
        "\"proof\":[null]".into(),
        "\"proof\":{}".into(),
        "\"proof\":\"\"".into(),
        format!("\"proof\":\"{hash}\""),
        format!("\"proof\":[[\"{hash}\"]]"),
        format!("\"proof\":[\"{}\"]", hash.to_uppercase()),
        format!("\"proof\":[\"{}\"]", &hash[..62]),
        format!("\"proof\":[\"{hash}00\"]"),
        format!("\"proof\":[\"{hash}\",]"),
    ] {
        refused(sub(&s, &proof, &to).as_bytes());
    }
    // A line without a proof, and with an empty one, differ (the
    // verifier refuses proofs in a complete bundle).
    let (_, none) = agree(h.as_bytes()).unwrap();
    assert_eq!(none, None);
    let with = sub(&h, "{\"digest\"", "{\"proof\":[],\"digest\"");
    let (_, empty) = agree(with.as_bytes()).unwrap();
    assert_eq!(empty, Some(vec![]));
}

#[test]
fn probe_signatures() {
    let s = revealed();
    let sig = "\"signature\":{\"key_id\":\"agent-0123456789ab\",\"signature\":\"CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQ==\"}";
    let b64 =
        "CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQ==";
    for to in [
        "\"signature\":null".to_owned(),
        format!("\"signature\":{{\"signature\":\"{b64}\",\"key_id\":\"\"}}"),
        format!("\"signature\" : {{ \"key_id\" : \"k\" , \"signature\" : \"{b64}\" }}"),
    ] {
        fast_takes(sub(&s, sig, &to).as_bytes());
    }
    for to in [
        "\"signature\":[]".to_owned(),
        format!("\"signature\":[\"agent-0123456789ab\",\"{b64}\"]"),
        "\"signature\":{}".into(),
        "\"signature\":false".into(),
        format!("\"signature\":\"{b64}\""),
        format!("\"signature\":{{\"signature\":\"{b64}\"}}"),
        "\"signature\":{\"key_id\":\"k\"}".into(),
        format!("\"signature\":{{\"key_id\":\"k\",\"signature\":\"{b64}\",\"x\":1}}"),
        format!("\"signature\":{{\"key_id\":null,\"signature\":\"{b64}\"}}"),
        format!("\"signature\":{{\"key_id\":1,\"signature\":\"{b64}\"}}"),
        "\"signature\":{\"key_id\":\"k\",\"signature\":null}".into(),
        "\"signature\":{\"key_id\":\"k\",\"signature\":\"AA==\"}".into(),
        format!("\"signature\":{{\"key_id\":\"k\",\"signature\":\"{b64}AA==\"}}"),
        format!(
            "\"signature\":{{\"key_id\":\"k\",\"signature\":\"{}\"}}",
            b64.trim_end_matches('=')
        ),
        format!(
            "\"signature\":{{\"key_id\":\"k\",\"signature\":\"{}CR==\"}}",
            &b64[..b64.len() - 4]
        ),
        format!("\"signature\":{{\"key_id\":\"k\",\"signature\":\" {b64}\"}}"),
        format!(
            "\"signature\":{{\"key_id\":\"k\",\"signature\":\"{}\"}}",
            b64.replace('Q', "-")
        ),
    ] {
        refused(sub(&s, sig, &to).as_bytes());
    }
    // A signature missing from the line entirely is refused too.
    refused(sub(&s, &format!(",{sig}"), "").as_bytes());
}

#[test]
fn probe_salts_and_hidden() {
    let s = revealed();
    let h = hidden();
    let salt = "\"content\":\"67a8e6d5f862af82f527c35eeddee744\"";
    let commitment =
        "\"content\":\"0363839e668f2c701e382470edf1e43ec78f76eb95e41840aadfd9a84f181cc2\"";
    for line in [
        // Revealed and hidden at once.
        sub(&s, "\"hidden\":{}", &format!("\"hidden\":{{{commitment}}}")),
        // Hidden, yet its value given.
        sub(&h, "\"fields\":{", "\"fields\":{\"content\":\"x\","),
        sub(&h, "\"fields\":{", "\"fields\":{\"content\":null,"),
        // Hidden with a salt too.
        sub(&h, "\"salts\":{", &format!("\"salts\":{{{salt},")),
        // Neither salt nor commitment.
        sub(&s, &format!("{salt},"), ""),
        sub(&h, &format!("{commitment},"), ""),
        // Revealed without its value (a salt, no member in fields).
        sub(&s, "\"content\":\"x\",", ""),
        // Salts and commitments not in their exact form.
        sub(&s, salt, &salt.to_uppercase().replace("CONTENT", "content")),
        sub(&s, salt, "\"content\":\"67a8e6d5f862af82f527c35eeddee7\""),
        sub(
            &s,
            salt,
            "\"content\":\"67a8e6d5f862af82f527c35eeddee74400\"",
        ),
        sub(&s, salt, "\"content\":null"),
        sub(&s, salt, "\"content\":0"),
        sub(
            &h,
            commitment,
            &commitment.to_uppercase().replace("CONTENT", "content"),
        ),
        sub(&h, commitment, "\"content\":\"0363\""),
        sub(&h, commitment, "\"content\":null"),
        sub(&s, "\"hidden\":{}", "\"hidden\":null"),
        sub(&s, "\"hidden\":{}", "\"hidden\":[]"),
        sub(&s, "\"salts\":{", "\"salts\":[{"),
    ] {
        refused(line.as_bytes());
    }
    // Fields no disclosure may hide, hidden by hand: the general
    // decoder reads a blank value (text) or refuses (index, kind,
    // time, status); the fast decoder agrees either way.
    for field in [
        "org_id",
        "agent_id",
        "session_id",
        "step_type_original",
        "signer_key_id",
    ] {
        fast_takes(hide_raw(&s, field).as_bytes());
    }
    for field in ["step_index", "step_type", "created_at", "status"] {
        refused(hide_raw(&s, field).as_bytes());
    }
    // Revealed as `null`: absent for the optional members, refused
    // for the required ones.
    for field in [
        "content",
        "input_data",
        "output_data",
        "confidence",
        "duration_ms",
        "token_count",
        "model",
        "metadata",
        "turn_id",
        "turn_step",
        "task_id",
        "signer_key_id",
    ] {
        let mut value: Value = serde_json::from_str(&s).unwrap();
        value["fields"][field] = Value::Null;
        fast_takes(value.to_string().as_bytes());
    }
    for field in [
        "trace_id",
        "org_id",
        "agent_id",
        "session_id",
        "step_index",
        "step_type",
        "step_type_original",
        "created_at",
        "links",
        "status",
    ] {
        let mut value: Value = serde_json::from_str(&s).unwrap();
        value["fields"][field] = Value::Null;
        refused(value.to_string().as_bytes());
    }
}

#[test]
fn probe_links() {
    let s = revealed();
    let links = "\"links\":{\"tool_call\":\"tc-1\"}";
    for to in [
        "\"links\":{}",
        "\"links\":{\"tool_call\":\"\"}",
        "\"links\":{\"parent\":\"p\",\"corrects\":\"c\",\"tool_call\":\"t\",\"policy_decision\":\"d\",\"approval_request\":\"r\",\"audit_event\":\"e\"}",
        "\"links\":{\"tool\\u005fcall\":\"t\"}",
    ] {
        fast_takes(sub(&s, links, to).as_bytes());
    }
    for to in [
        "\"links\":null",
        "\"links\":[]",
        "\"links\":\"\"",
        "\"links\":{\"bogus\":\"x\"}",
        "\"links\":{\"\":\"x\"}",
        "\"links\":{\"Tool_call\":\"x\"}",
        "\"links\":{\"tool_call\":null}",
        "\"links\":{\"tool_call\":1}",
        "\"links\":{\"tool_call\":[\"x\"]}",
        "\"links\":{\"tool_call\":\"a\",\"tool_call\":\"b\"}",
        "\"links\":{\"tool_call\":\"a\",\"tool\\u005fcall\":\"b\"}",
    ] {
        refused(sub(&s, links, to).as_bytes());
    }
}

#[test]
fn probe_status_kind_and_type_spellings() {
    let s = revealed();
    fast_takes(sub(&s, "\"status\":\"flagged\"", "\"status\":\"ok\"").as_bytes());
    for status in [
        "\"OK\"",
        "\"Ok\"",
        "\"flagged \"",
        "\" ok\"",
        "\"\"",
        "null",
        "1",
        "true",
    ] {
        refused(
            sub(
                &s,
                "\"status\":\"flagged\"",
                &format!("\"status\":{status}"),
            )
            .as_bytes(),
        );
    }
    for kind in ["\"reasoning\"", "\"action\""] {
        fast_takes(
            sub(
                &s,
                "\"step_type\":\"tool_call\"",
                &format!("\"step_type\":{kind}"),
            )
            .as_bytes(),
        );
    }
    for kind in [
        "\"ToolCall\"",
        "\"TOOL_CALL\"",
        "\"tool-call\"",
        "\" tool_call\"",
        "\"[tool_call]\"",
        "\"toolcall\"",
        "\"思考\"",
        "\"\"",
        "null",
        "1",
    ] {
        refused(
            sub(
                &s,
                "\"step_type\":\"tool_call\"",
                &format!("\"step_type\":{kind}"),
            )
            .as_bytes(),
        );
    }
    for label in ["\"\"", "\"思考\"", "\"\\u0000\""] {
        fast_takes(
            sub(
                &s,
                "\"step_type_original\":\"ToolCall\"",
                &format!("\"step_type_original\":{label}"),
            )
            .as_bytes(),
        );
    }
    for label in ["null", "1", "[]"] {
        refused(
            sub(
                &s,
                "\"step_type_original\":\"ToolCall\"",
                &format!("\"step_type_original\":{label}"),
            )
            .as_bytes(),
        );
    }
    for ty in [
        "\"Step\"",
        "\"step \"",
        "\"session_start\"",
        "\"seal\"",
        "null",
        "1",
        "\"\"",
    ] {
        refused(sub(&s, "\"type\":\"step\"", &format!("\"type\":{ty}")).as_bytes());
    }
    for (flag, v) in [("has_embedding", "true"), ("erased", "true")] {
        fast_takes(sub(&s, &format!("\"{flag}\":false"), &format!("\"{flag}\":{v}")).as_bytes());
    }
    for flag in ["has_embedding", "erased"] {
        for v in ["0", "1", "\"false\"", "null", "[]"] {
            refused(sub(&s, &format!("\"{flag}\":false"), &format!("\"{flag}\":{v}")).as_bytes());
        }
    }
}

#[test]
fn probe_timestamps() {
    let s = revealed();
    let at = "2025-01-15T10:30:00.000000Z";
    for t in [
        "1970-01-01T00:00:00.000000Z",
        "2025-12-31T23:59:59.999999Z",
        "2024-02-29T00:00:00.000001Z",
    ] {
        fast_takes(
            sub(
                &s,
                &format!("\"created_at\":\"{at}\""),
                &format!("\"created_at\":\"{t}\""),
            )
            .as_bytes(),
        );
        fast_takes(
            sub(
                &s,
                &format!("\"logged_at\":\"{at}\""),
                &format!("\"logged_at\":\"{t}\""),
            )
            .as_bytes(),
        );
    }
    for t in [
        "\"2025-01-15T10:30:00Z\"",
        "\"2025-01-15T10:30:00.000Z\"",
        "\"2025-01-15T10:30:00.0000000Z\"",
        "\"2025-01-15T10:30:00.000000z\"",
        "\"2025-01-15t10:30:00.000000Z\"",
        "\"2025-01-15 10:30:00.000000Z\"",
        "\"2025-01-15T10:30:00.000000+00:00\"",
        "\"2025-02-30T10:30:00.000000Z\"",
        "\"2025-01-15T24:00:00.000000Z\"",
        "\"2025-01-15T23:59:60.000000Z\"",
        "\"2025-13-15T10:30:00.000000Z\"",
        "\"+2025-01-15T10:30:00.00000Z\"",
        "\"-025-01-15T10:30:00.000000Z\"",
        "\"2025-01-15T10:30:00.00000-Z\"",
        "\"２025-01-15T10:30:00.00000Z\"",
        "\"\"",
        "null",
        "1736937000000000",
    ] {
        refused(
            sub(
                &s,
                &format!("\"created_at\":\"{at}\""),
                &format!("\"created_at\":{t}"),
            )
            .as_bytes(),
        );
        refused(
            sub(
                &s,
                &format!("\"logged_at\":\"{at}\""),
                &format!("\"logged_at\":{t}"),
            )
            .as_bytes(),
        );
    }
}

#[test]
fn probe_missing_members() {
    let s = revealed();
    let top: Value = serde_json::from_str(&s).unwrap();
    for name in top.as_object().unwrap().keys() {
        let mut value = top.clone();
        value.as_object_mut().unwrap().remove(name);
        let line = value.to_string();
        if name == "proof" {
            fast_takes(line.as_bytes());
        } else {
            refused(line.as_bytes());
        }
    }
}

#[test]
fn probe_lines_in_every_stage_prepare_alike() {
    // Lines that are not step entries: the fast decoder leaves them,
    // and they are prepared exactly as before.
    let op = r#"{"seq":0,"type":"session_start","logged_at":"2025-01-15T10:30:00.000000Z","view":{},"hash":"00"}"#;
    for line in [
        r#"{"cairn_bundle":2}"#,
        r#"{"checkpoint":"x"}"#,
        r#"{"consistency":{"old_size":1,"proof":[]}}"#,
        r#"{"selection":{},"note":"x"}"#,
        r#"{"end":{"entries":1}}"#,
        op,
    ] {
        general_decides(line.as_bytes());
    }
    // A step line carrying a member of another line: left alone.
    let s = revealed();
    for member in [
        "\"end\":{\"entries\":1}",
        "\"consistency\":{}",
        "\"selection\":{}",
        "\"checkpoint\":\"x\"",
    ] {
        refused(sub(&s, "{\"digest\"", &format!("{{{member},\"digest\"")).as_bytes());
    }
}

#[test]
fn probe_member_order_and_line_ends() {
    // Members in any order: the same entry.
    let s = revealed();
    let top: Value = serde_json::from_str(&s).unwrap();
    let reversed: Vec<String> = top
        .as_object()
        .unwrap()
        .iter()
        .rev()
        .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
        .collect();
    let line = format!("{{{}}}", reversed.join(","));
    assert_eq!(agree(line.as_bytes()), agree(s.as_bytes()));
    // A line read with its line end is prepared as the line without.
    for (with, kept) in [("\n", ""), ("\r\n", ""), ("\r", "\r"), ("\n\n", "\n")] {
        let read = crate::bundle::PreparedLine::from_vec(format!("{s}{with}").into_bytes());
        let trimmed = format!("{s}{kept}");
        let alone = crate::bundle::PreparedLine::general(trimmed.as_bytes().into());
        assert!(format!("{read:?}") == format!("{alone:?}"), "{with:?}");
    }
}
