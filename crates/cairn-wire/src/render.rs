//! Human-readable renderings of a session: plain text, and seed 002's
//! Markdown with its bracket labels (`[思考]`, `[計画]`, `[承認待ち]`,
//! `[実行]`, `[エラー]`), one `## Turn` section per turn; and the grouping
//! of a session's steps into turns (its audit trail).

use cairn_core::commit::StepRecord;
use cairn_core::kind::StepKind;
use std::fmt::Write as _;

/// `text` as a terminal may show it: every control character but line
/// feeds and tabs (escape sequences, carriage returns, backspaces), the
/// line and paragraph separators (U+2028, U+2029, line breaks to some
/// viewers), and every bidirectional embedding, override or isolate, written as its
/// escape (`\u{1b}`). What a step's author wrote is printed by `cairn`
/// among other steps and verdicts: left in, it could move the cursor,
/// erase or recolour a line, or reorder the text around it, and show a
/// reader something the ledger does not hold.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Plain text: one line per step with index, kind, time, hash prefix and
/// content (on one line, [`cairn_core::thinking::one_line`]).
pub fn text(session_id: &str, agent_id: &str, steps: &[StepRecord]) -> String {
    let mut out = format!(
        "session {session_id} (agent {agent_id}), {} steps\n",
        steps.len()
    );
    for r in steps {
        let s = &r.step;
        let _ = writeln!(
            out,
            "[{}] {} {:<12} {}  {}{}",
            s.step_index,
            s.created_at,
            s.kind_label,
            &r.hash.to_hex()[..12],
            s.content.as_deref().map_or_else(
                || if r.erased { "(erased)" } else { "" }.to_owned(),
                cairn_core::thinking::one_line
            ),
            if s.status == cairn_core::record::Status::Flagged {
                "  [flagged]"
            } else {
                ""
            }
        );
    }
    out
}

/// One turn of a session (seed 002): its id, `None` for the steps
/// recorded without one, and its steps in order.
#[derive(Debug)]
pub struct Turn<'a> {
    /// The turn id.
    pub turn_id: Option<&'a str>,
    /// Its steps, by turn step number, then by step index.
    pub steps: Vec<&'a StepRecord>,
}

/// A session's audit trail across its turns (seed 002's `getAuditTrail`):
/// turns in the order of their first step, each turn's steps by their
/// number within the turn (then by index, which breaks ties and orders
/// steps recorded without a number).
pub fn turns(steps: &[StepRecord]) -> Vec<Turn<'_>> {
    let mut out: Vec<Turn<'_>> = Vec::new();
    // Each turn's place in `out`, so that a session of many turns costs
    // one look-up a step, not a scan of the turns so far.
    let mut place: std::collections::HashMap<Option<&str>, usize> =
        std::collections::HashMap::new();
    for r in steps {
        let id = r.step.turn_id.as_deref();
        match place.get(&id) {
            Some(&at) => out[at].steps.push(r),
            None => {
                place.insert(id, out.len());
                out.push(Turn {
                    turn_id: id,
                    steps: vec![r],
                });
            }
        }
    }
    for turn in &mut out {
        turn.steps
            .sort_by_key(|r| (r.step.turn_step.unwrap_or(u64::MAX), r.step.step_index));
    }
    out
}

/// `2026-02-23T10:30:00Z`: seed 002's headings show seconds.
fn heading_time(r: &StepRecord) -> String {
    let full = r.step.created_at.to_string();
    format!("{}Z", full.get(..19).unwrap_or(&full))
}

/// Seed 002's `exportMarkdown` of one turn: a `## Turn <id> (<time>)`
/// heading, then each step as `<label> <content>` on one line, with the
/// tool call, policy decision and approval request it links to.
pub fn turn_markdown(turn: &Turn<'_>) -> String {
    let Some(first) = turn.steps.first() else {
        return String::new();
    };
    let mut out = match turn.turn_id {
        Some(id) => format!("## Turn {id} ({})\n", heading_time(first)),
        None => format!("## Steps outside any turn ({})\n", heading_time(first)),
    };
    for r in &turn.steps {
        let s = &r.step;
        let content = match &s.content {
            Some(c) => cairn_core::thinking::one_line(c),
            None if r.erased => "(erased)".to_owned(),
            None if !r.is_revealed(cairn_core::commit::Field::Content) => "(hidden)".to_owned(),
            None => String::new(),
        };
        // Seed 002 has five labels; a kind it has no label of (a decision,
        // a correction, a final answer...) gets the nearest, `[思考]`, and
        // is named after it, so that a reader tells it from musing.
        let label = s.kind.bracket_label();
        let _ = if label == StepKind::Reasoning.bracket_label() && s.kind != StepKind::Reasoning {
            write!(out, "\n{label} ({}) {content}", s.kind.as_str())
        } else {
            write!(out, "\n{label} {content}")
        };
        for (name, link) in [
            ("tool_call", &s.links.tool_call),
            ("policy_decision", &s.links.policy_decision),
            ("approval_request", &s.links.approval_request),
            ("corrects", &s.links.corrects),
        ] {
            if let Some(id) = link {
                let _ = write!(out, " ({name}: {id})");
            }
        }
        if s.status == cairn_core::record::Status::Flagged {
            out.push_str(" (flagged for review)");
        }
        out.push('\n');
    }
    out
}

/// Seed 002's Markdown of a whole session: a `# Session` title, then every
/// turn as [`turn_markdown`] renders it, in trail order.
pub fn markdown(session_id: &str, steps: &[StepRecord]) -> String {
    let mut out = format!("# Session {session_id}\n");
    for turn in turns(steps) {
        out.push('\n');
        out.push_str(&turn_markdown(&turn));
    }
    out
}

#[cfg(test)]
mod tests {
    /// Escape sequences, carriage returns and bidirectional overrides are
    /// shown, not obeyed; line feeds, tabs and other text pass as they are.
    #[test]
    fn terminals_are_shown_the_text_not_its_controls() {
        assert_eq!(
            super::terminal_safe("ok\u{1b}[2K\rfake\u{202e}x\n\tdone é\u{2028}"),
            "ok\\u{1b}[2K\\u{d}fake\\u{202e}x\n\tdone é\\u{2028}"
        );
        assert!(matches!(
            super::terminal_safe("plain\ntext"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    use super::*;
    use cairn_core::Timestamp;
    use cairn_core::commit::StepRecord;
    use cairn_core::record::Step;

    #[test]
    fn markdown_follows_seed_002() {
        let t = Timestamp::parse_rfc3339("2026-02-23T10:30:00Z").unwrap();
        let mut prev = cairn_core::Hash::ZERO;
        let mut steps = Vec::new();
        for (i, (kind, content, tool_call)) in [
            (
                "thinking",
                "The user asked me to check system status.",
                None,
            ),
            ("plan", "1. Call check_credits  2. Call check_inbox", None),
            (
                "execute",
                "check_credits -> $2.50 remaining",
                Some("01JXYZ-TC1"),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let mut s = Step::new(format!("t{i}"), "acme", "a", "s", i as u64, kind, t).unwrap();
            s.content = Some(content.into());
            s.turn_id = Some("01JXYZ".into());
            s.links.tool_call = tool_call.map(str::to_owned);
            let r = StepRecord::new(s, &[0; 32], prev);
            prev = r.hash;
            steps.push(r);
        }
        assert_eq!(
            markdown("s", &steps),
            "# Session s\n\n## Turn 01JXYZ (2026-02-23T10:30:00Z)\n\n\
             [思考] The user asked me to check system status.\n\n\
             [計画] 1. Call check_credits  2. Call check_inbox\n\n\
             [実行] check_credits -> $2.50 remaining (tool_call: 01JXYZ-TC1)\n"
        );
    }

    /// A kind seed 002 has no label of is named beside `[思考]`, and a
    /// flagged step and a correction say so.
    #[test]
    fn markdown_names_what_thinking_does_not_cover() {
        let t = Timestamp::parse_rfc3339("2026-02-23T10:30:00Z").unwrap();
        let mut decision = Step::new("t0", "acme", "a", "s", 0, "Decision", t).unwrap();
        decision.content = Some("refund".into());
        decision.status = cairn_core::record::Status::Flagged;
        let first = StepRecord::new(decision, &[0; 32], cairn_core::Hash::ZERO);
        let mut correction = Step::new("t1", "acme", "a", "s", 1, "Correction", t).unwrap();
        correction.content = Some("no refund".into());
        correction.links.corrects = Some("t0".into());
        let second = StepRecord::new(correction, &[0; 32], first.hash);
        let text = markdown("s", &[first, second]);
        assert!(
            text.contains("[思考] (decision) refund (flagged for review)\n"),
            "{text}"
        );
        assert!(
            text.contains("[思考] (correction) no refund (corrects: t0)\n"),
            "{text}"
        );
    }
}
