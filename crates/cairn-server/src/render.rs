//! Human-readable renderings of a session: plain text, and seed 002's
//! Markdown with its bracket labels (`[思考]`, `[計画]`, `[承認待ち]`,
//! `[実行]`, `[エラー]`), one `## Turn` section per turn.

use cairn_core::commit::StepRecord;
use std::fmt::Write as _;

/// Plain text: one line per step with index, kind, time, hash prefix and
/// content.
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
            s.content
                .as_deref()
                .unwrap_or(if r.erased { "(erased)" } else { "" }),
            if s.status == cairn_core::record::Status::Flagged {
                "  [flagged]"
            } else {
                ""
            }
        );
    }
    out
}

/// Seed 002's Markdown export: consecutive steps of one turn under a
/// `## Turn <id> (<time>)` heading (steps without a turn under the
/// session), each as `<label> <content>`, with the linked tool call noted.
pub fn markdown(session_id: &str, steps: &[StepRecord]) -> String {
    let mut out = format!("# Session {session_id}\n");
    let mut current: Option<Option<&str>> = None;
    for r in steps {
        let s = &r.step;
        let turn = s.turn_id.as_deref();
        if current != Some(turn) {
            current = Some(turn);
            match turn {
                Some(t) => {
                    let _ = write!(out, "\n## Turn {t} ({})\n", s.created_at);
                }
                None => {
                    let _ = write!(out, "\n## Session {session_id} ({})\n", s.created_at);
                }
            }
        }
        let content = s
            .content
            .as_deref()
            .unwrap_or(if r.erased { "(erased)" } else { "" });
        let _ = write!(out, "\n{} {content}", s.kind.bracket_label());
        if let Some(tool_call) = &s.links.tool_call {
            let _ = write!(out, " (tool_call: {tool_call})");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
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
            "# Session s\n\n## Turn 01JXYZ (2026-02-23T10:30:00.000000Z)\n\n\
             [思考] The user asked me to check system status.\n\n\
             [計画] 1. Call check_credits  2. Call check_inbox\n\n\
             [実行] check_credits -> $2.50 remaining (tool_call: 01JXYZ-TC1)\n"
        );
    }
}
