//! Probes of the typed step-line decoder, one per way a line could be
//! doubtful in its syntax (escapes, duplicates, numbers, white space,
//! encodings, nesting), with the helpers every probe uses; the probes of
//! what a line carries are in `fast_probes_records.rs`. Each states which
//! decoder answers, and that they agree.

use super::*;

/// Stricter than `check`: equal also where `PartialEq` is lenient
/// (`-0.0 == 0.0`), by their `Debug` text and their encodings, with
/// the same step digest; and `PreparedLine::new` prepares the line
/// exactly as the general path alone does (so the verifier, which
/// sees only the prepared line, cannot tell the paths apart).
pub(super) fn agree(line: &[u8]) -> Option<ProvenEntry> {
    let fast = check(line);
    if let Some(fast) = &fast {
        let general = general(line).expect("checked above");
        assert_eq!(
            format!("{fast:?}"),
            format!("{general:?}"),
            "{}",
            String::from_utf8_lossy(line)
        );
        assert_eq!(
            encode_entry(&fast.0, fast.1.as_deref()),
            encode_entry(&general.0, general.1.as_deref())
        );
        if let (LogRecord::Step(a), LogRecord::Step(b)) = (&fast.0.record, &general.0.record) {
            assert_eq!(a.recompute_digest(), b.recompute_digest());
        }
    }
    let prepared = crate::bundle::PreparedLine::new(line);
    let alone = crate::bundle::PreparedLine::general(std::borrow::Cow::Borrowed(line));
    assert_eq!(
        format!("{prepared:?}"),
        format!("{alone:?}"),
        "prepared differently: {}",
        String::from_utf8_lossy(line)
    );
    fast
}

/// The fast decoder answers, and the general one the same.
fn fast_takes(line: &[u8]) {
    assert!(
        agree(line).is_some(),
        "the fast decoder gave up on: {}",
        String::from_utf8_lossy(line)
    );
}

/// The fast decoder gives up (the general one decides).
fn general_decides(line: &[u8]) {
    assert!(
        agree(line).is_none(),
        "the fast decoder answered: {}",
        String::from_utf8_lossy(line)
    );
}

/// The fast decoder gives up, and the general one refuses the line.
fn refused(line: &[u8]) {
    general_decides(line);
    assert!(general(line).is_none(), "{}", String::from_utf8_lossy(line));
}

/// The fast decoder gives up, and the general one reads the line (a
/// number of magnitude 2^53 or more that is not an integer literal: the
/// fast decoder cannot tell it from one, see `Plain`).
fn general_takes(line: &[u8]) {
    general_decides(line);
    assert!(general(line).is_some(), "{}", String::from_utf8_lossy(line));
}

/// `line` with `from` replaced (once) by `to`; `from` must be there.
fn sub(line: &str, from: &str, to: &str) -> String {
    assert!(line.contains(from), "{from} is not in {line}");
    line.replacen(from, to, 1)
}

/// A revealed line (signed, with a proof), and one with every
/// hideable field hidden.
fn revealed() -> String {
    entry_line(0, true, true, "x")
}

fn hidden() -> String {
    entry_line(0x3fff, true, false, "x")
}

/// The line with `field` moved from `fields` and `salts` to `hidden`
/// (even a field a disclosure may not hide).
fn hide_raw(line: &str, field: &str) -> String {
    let mut value: Value = serde_json::from_str(line).unwrap();
    value["fields"].as_object_mut().unwrap().remove(field);
    value["salts"].as_object_mut().unwrap().remove(field);
    value["hidden"]
        .as_object_mut()
        .unwrap()
        .insert(field.into(), json!(Hash::sha256(field.as_bytes()).to_hex()));
    value.to_string()
}

/// The line with the member `name` of the object at `scope` ("" for
/// the line) written twice, first as `dup`.
fn duplicated(line: &str, scope: &str, name: &str, dup: &str) -> String {
    let at = if scope.is_empty() {
        1
    } else {
        line.find(&format!("\"{scope}\":{{")).unwrap() + scope.len() + 4
    };
    assert!(line.contains(&format!("\"{name}\":")));
    format!("{}\"{name}\":{dup},{}", &line[..at], &line[at..])
}

#[test]
fn probe_escaped_member_names() {
    let s = revealed();
    // Escaped names where the fast decoder matches names: given up.
    for line in [
        sub(&s, "\"seq\"", "\"s\\u0065q\""),
        sub(&s, "\"type\"", "\"typ\\u0065\""),
        sub(&s, "\"trace_id\"", "\"trace\\u005fid\""),
        sub(
            &s,
            "\"salts\":{\"agent_id\"",
            "\"salts\":{\"agent\\u005fid\"",
        ),
        sub(&s, "{\"key_id\"", "{\"key\\u005fid\""),
        sub(&s, "\"signature\":\"CQ", "\"signatur\\u0065\":\"CQ"),
        sub(&s, "\"proof\"", "\"\\u0070roof\""),
        sub(
            &hidden(),
            "\"hidden\":{\"confidence\"",
            "\"hidden\":{\"c\\u006fnfidence\"",
        ),
    ] {
        general_decides(line.as_bytes());
    }
    // Escaped names inside JSON values and links are read as the
    // general decoder reads them.
    for line in [
        sub(&s, "{\"tool_call\"", "{\"tool\\u005fcall\""),
        sub(&s, "{\"n\":", "{\"\\u006e\":"),
        sub(&s, "{\"k\":{\"nested\"", "{\"\\u006b\":{\"nest\\u0065d\""),
        sub(&s, "{\"n\":", "{\"\\u0000\":0,\"n\":"),
    ] {
        fast_takes(line.as_bytes());
    }
}

#[test]
fn probe_empty_and_unknown_member_names() {
    let s = revealed();
    for line in [
        sub(&s, "{\"digest\"", "{\"\":1,\"digest\""),
        sub(&s, "\"fields\":{", "\"fields\":{\"\":1,"),
        sub(
            &s,
            "\"salts\":{",
            "\"salts\":{\"\":\"00000000000000000000000000000000\",",
        ),
        sub(&s, "\"hidden\":{", "\"hidden\":{\"\":\"00\","),
        sub(&s, "{\"key_id\"", "{\"\":\"k\",\"key_id\""),
        sub(&s, "{\"tool_call\"", "{\"\":\"x\",\"tool_call\""),
        sub(&s, "{\"digest\"", "{\"view\":{},\"digest\""),
        sub(&s, "\"fields\":{", "\"fields\":{\"current_hash\":1,"),
        sub(&s, "{\"tool_call\"", "{\"bogus\":\"x\",\"tool_call\""),
    ] {
        refused(line.as_bytes());
    }
    // An empty name inside a JSON value is data.
    fast_takes(sub(&s, "{\"n\":", "{\"\":[],\"n\":").as_bytes());
}

#[test]
fn probe_escapes_in_values() {
    let s = revealed();
    // Read as owned strings: taken, with the general decoder's text.
    for (from, to) in [
        ("\"content\":\"x\"", "\"content\":\"\\u0000\""),
        (
            "\"content\":\"x\"",
            "\"content\":\"\\ud83d\\ude00\\/\\\"\\\\\\b\\f\\n\\r\\t\"",
        ),
        ("\"content\":\"x\"", "\"content\":\"\\uFFFF\\uDBFF\\uDFFF\""),
        ("\"trace_id\":\"trace-1\"", "\"trace_id\":\"trace\\u002d1\""),
        ("\"key_id\":\"agent", "\"key_id\":\"\\u0061gent"),
        ("\"status\":\"flagged\"", "\"status\":\"\\u0066lagged\""),
        (
            "\"step_type\":\"tool_call\"",
            "\"step_type\":\"tool\\u005fcall\"",
        ),
        (
            "\"created_at\":\"2025-01-15T10:30:00.000000Z\"",
            "\"created_at\":\"2025-01-15T10:30:00.000000\\u005a\"",
        ),
        ("\"tool_call\":\"tc-1\"", "\"tool_call\":\"tc\\u002d1\""),
        ("\"sql\":\"SELECT 1\"", "\"sql\":\"\\u0000\\ud800\\udc00\""),
    ] {
        fast_takes(sub(&s, from, to).as_bytes());
    }
    // Lone or reversed surrogates are refused by both.
    for bad in [
        "\\ud800",
        "\\udc00",
        "\\udc00\\ud800",
        "\\ud800\\u0041",
        "\\ud800x",
    ] {
        refused(sub(&s, "\"content\":\"x\"", &format!("\"content\":\"{bad}\"")).as_bytes());
        refused(sub(&s, "\"sql\":\"SELECT 1\"", &format!("\"sql\":\"{bad}\"")).as_bytes());
        refused(sub(&s, "{\"n\":", &format!("{{\"{bad}\":1,\"n\":")).as_bytes());
    }
    // Read as borrowed text (the members the fast decoder compares or
    // decodes as hex or base64): an escape makes it give up.
    for (from, to) in [
        ("\"type\":\"step\"", "\"type\":\"st\\u0065p\""),
        ("\"logged_at\":\"2025", "\"logged_at\":\"\\u00325"),
        ("\"digest\":\"d", "\"digest\":\"\\u0064"),
        ("\"hash\":\"b", "\"hash\":\"\\u0062"),
        ("\"prev_hash\":\"8", "\"prev_hash\":\"\\u0038"),
        ("\"proof\":[\"c", "\"proof\":[\"\\u0063"),
        ("\"signature\":\"CQ", "\"signature\":\"\\u0043Q"),
        ("\"agent_id\":\"1", "\"agent_id\":\"\\u0031"),
    ] {
        general_decides(sub(&s, from, to).as_bytes());
    }
}

#[test]
fn probe_duplicate_members_at_every_depth() {
    let s = revealed();
    let h = hidden();
    let top: Value = serde_json::from_str(&s).unwrap();
    for (name, member) in top.as_object().unwrap() {
        refused(duplicated(&s, "", name, &member.to_string()).as_bytes());
    }
    for scope in ["fields", "salts", "signature"] {
        for (name, member) in top[scope].as_object().unwrap() {
            refused(duplicated(&s, scope, name, &member.to_string()).as_bytes());
        }
    }
    let top: Value = serde_json::from_str(&h).unwrap();
    for (name, member) in top["hidden"].as_object().unwrap() {
        refused(duplicated(&h, "hidden", name, &member.to_string()).as_bytes());
    }
    for (from, to) in [
        (
            "{\"tool_call\":\"tc-1\"}",
            "{\"tool_call\":\"tc-1\",\"tool_call\":\"tc-1\"}",
        ),
        (
            "{\"tool_call\":\"tc-1\"}",
            "{\"tool_call\":\"a\",\"tool_call\":\"b\"}",
        ),
        ("\"sql\":\"SELECT 1\"", "\"sql\":\"SELECT 1\",\"sql\":\"x\""),
        ("[1,2.5,null,true]", "[1,{\"a\":1,\"a\":1}]"),
        ("[1,2.5,null,true]", "[[[{\"a\":{\"b\":0,\"b\":0}}]]]"),
        ("{\"nested\":", "{\"nested\":1,\"nested\":"),
        (
            "\"output_data\":\"rows\"",
            "\"output_data\":{\"\":1,\"\":1}",
        ),
        // The same name, once escaped: still a duplicate.
        (
            "\"sql\":\"SELECT 1\"",
            "\"sql\":\"SELECT 1\",\"s\\u0071l\":\"x\"",
        ),
    ] {
        refused(sub(&s, from, to).as_bytes());
    }
}

#[test]
fn probe_numbers_inside_json_values() {
    let s = revealed();
    for n in [
        "9007199254740991",
        "-9007199254740991",
        "0",
        "-0",
        "-0.0",
        "0.0",
        "1.0",
        "1e2",
        "100",
        "1E+2",
        "1e-400",
        "-1e-400",
        "0.1",
        "5e-324",
        "2.4703282292062328e-324",
        "9007199254740991.0",
        "-9.007199254740991e15",
    ] {
        fast_takes(sub(&s, "[1,2.5", &format!("[{n},2.5")).as_bytes());
        fast_takes(
            sub(
                &s,
                "\"output_data\":\"rows\"",
                &format!("\"output_data\":{n}"),
            )
            .as_bytes(),
        );
    }
    // Floats as large as 2^53: valid, but the fast decoder cannot tell
    // them from an integer literal too long for 64 bits, so it gives up.
    for n in [
        "9007199254740992.0",
        "-9007199254740992.0",
        "1e308",
        "12345678901234567890.5",
        "123456789012345678901234567890e0",
        "1.7976931348623157e308",
    ] {
        general_takes(sub(&s, "[1,2.5", &format!("[{n},2.5")).as_bytes());
        general_takes(
            sub(
                &s,
                "\"output_data\":\"rows\"",
                &format!("\"output_data\":{n}"),
            )
            .as_bytes(),
        );
    }
    for n in [
        "9007199254740992",
        "-9007199254740992",
        "18446744073709551616",
        "123456789012345678901234567890",
        "1e400",
        "-1e400",
        "01",
        "-",
        "1.",
        ".5",
        "+1",
        "0x10",
        "NaN",
        "Infinity",
    ] {
        refused(sub(&s, "[1,2.5", &format!("[{n},2.5")).as_bytes());
        refused(sub(&s, "{\"nested\":", &format!("{{\"n\":{n},\"nested\":")).as_bytes());
    }
}

#[test]
fn probe_integer_members() {
    let s = revealed();
    let members = [
        ("\"seq\":41", "seq"),
        ("\"step_index\":3", "step_index"),
        ("\"duration_ms\":12", "duration_ms"),
        ("\"token_count\":0", "token_count"),
        ("\"turn_step\":2", "turn_step"),
    ];
    for (from, name) in members {
        for n in ["0", "7", "9007199254740991"] {
            fast_takes(sub(&s, from, &format!("\"{name}\":{n}")).as_bytes());
        }
        // Not a non-negative integer literal: the general decoder
        // refuses, whatever value the number has.
        for n in [
            "-0",
            "-0.0",
            "0.0",
            "1.0",
            "1e2",
            "1E2",
            "1e0",
            "10e-1",
            "-1",
            "-7",
            "\"7\"",
            "9007199254740992",
            "true",
            "[]",
            "{}",
            "1e400",
        ] {
            refused(sub(&s, from, &format!("\"{name}\":{n}")).as_bytes());
        }
    }
    // null: absent for the optional ones, refused for the others.
    for (from, name) in &members[2..] {
        fast_takes(sub(&s, from, &format!("\"{name}\":null")).as_bytes());
    }
    for (from, name) in &members[..2] {
        refused(sub(&s, from, &format!("\"{name}\":null")).as_bytes());
    }
}

#[test]
fn probe_confidence() {
    let s = revealed();
    for c in [
        "0",
        "1",
        "-0",
        "-0.0",
        "0.0",
        "-1e-400",
        "1e-400",
        "7.5e-1",
        "0.75000000000000000000001",
        "0.30000000000000004",
        "9007199254740991",
        "-9007199254740991",
        "9007199254740991.0",
        "5e-324",
        "2.4703282292062328e-324",
        "null",
    ] {
        let line = sub(&s, "\"confidence\":0.75", &format!("\"confidence\":{c}"));
        fast_takes(line.as_bytes());
    }
    // As large as 2^53: the general decoder decides (see `general_takes`).
    for c in [
        "9007199254740992.0",
        "12345678901234567890.5",
        "123456789012345678901234567890.0",
        "1e308",
        "-1.7976931348623157e308",
    ] {
        let line = sub(&s, "\"confidence\":0.75", &format!("\"confidence\":{c}"));
        general_takes(line.as_bytes());
    }
    // The sign of a zero survives both readings.
    let line = sub(&s, "\"confidence\":0.75", "\"confidence\":-0");
    let (entry, _) = agree(line.as_bytes()).unwrap();
    let LogRecord::Step(record) = entry.record else {
        panic!()
    };
    assert!(record.step.confidence.unwrap().is_sign_negative());
    for c in [
        "1e309",
        "9007199254740992",
        "\"0.75\"",
        "true",
        "[]",
        "{}",
        "NaN",
        "-",
    ] {
        refused(sub(&s, "\"confidence\":0.75", &format!("\"confidence\":{c}")).as_bytes());
    }
}

#[test]
fn probe_white_space_bom_and_trailing_bytes() {
    let s = revealed();
    for line in [
        format!(" {s}"),
        format!("\t\r\n{s}"),
        format!("{s} "),
        format!("{s}\n"),
        format!("{s}\r\n"),
        s.replace("\":", "\" :\t").replace(",\"", " ,\n\""),
    ] {
        fast_takes(line.as_bytes());
    }
    for line in [
        format!("\u{FEFF}{s}"),
        format!("{s}\u{FEFF}"),
        format!("\u{A0}{s}"),
        format!("\x0c{s}"),
        format!("{s}\x0b"),
        format!("{s}\0"),
        format!("{s}x"),
        format!("{s},"),
        format!("{s}{{}}"),
        format!("{s}{s}"),
        format!("[{s}]"),
        String::new(),
        " ".into(),
        "null".into(),
        "\"step\"".into(),
        s[..s.len() - 1].to_owned(),
    ] {
        refused(line.as_bytes());
    }
}

#[test]
fn probe_bytes_that_are_not_utf8() {
    let s = revealed();
    let at_x = s.find("\"content\":\"x\"").unwrap() + "\"content\":\"".len();
    let at_sql = s.find("SELECT").unwrap();
    let at_link = s.find("tc-1").unwrap();
    let at_key = s.find("agent-0123").unwrap();
    let at_end = s.len() - 1;
    for bad in [
        &[0xffu8][..],
        &[0x80],
        &[0xc0, 0x80],
        &[0xc3],
        &[0xed, 0xa0, 0x80],
        &[0xed, 0xbf, 0xbf],
        &[0xf4, 0x90, 0x80, 0x80],
        &[0xf8, 0x88, 0x80, 0x80, 0x80],
        &[0xe2, 0x82],
    ] {
        for at in [at_x, at_sql, at_link, at_key, at_end] {
            let mut bytes = s.clone().into_bytes();
            bytes.splice(at..at, bad.iter().copied());
            refused(&bytes);
        }
    }
    // Raw control characters inside strings are not JSON; DEL is.
    for (c, ok) in [
        ('\0', false),
        ('\x1f', false),
        ('\n', false),
        ('\x7f', true),
    ] {
        let line = sub(&s, "\"content\":\"x\"", &format!("\"content\":\"{c}\""));
        if ok {
            fast_takes(line.as_bytes());
        } else {
            refused(line.as_bytes());
        }
    }
}

#[test]
fn probe_deep_nesting() {
    let s = revealed();
    // The line is depth 1, `fields` 2: the limit (128) falls inside
    // `input_data` at the same place for both readings.
    let mut taken = 0;
    for depth in 100..=140 {
        let arrays = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let objects = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        for nested in [arrays, objects] {
            let line = sub(
                &s,
                "\"output_data\":\"rows\"",
                &format!("\"output_data\":{nested}"),
            );
            let fast = agree(line.as_bytes());
            assert_eq!(
                fast.is_some(),
                general(line.as_bytes()).is_some(),
                "depth {depth}"
            );
            taken += usize::from(fast.is_some());
        }
    }
    assert!(taken > 0 && taken < 82);
    for depth in [1_000, 100_000] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        refused(
            sub(
                &s,
                "\"output_data\":\"rows\"",
                &format!("\"output_data\":{nested}"),
            )
            .as_bytes(),
        );
    }
}

/// Probes of what the lines carry: proofs, signatures, openings, links,
/// spellings, timestamps, missing members, stages and member order.
#[path = "fast_probes_records.rs"]
mod records;
