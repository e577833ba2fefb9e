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

/// The first line of a session as plain text: the session, its agent
/// and its count of steps, before each step's [`text_line`].
pub fn text_heading(session_id: &str, agent_id: &str, steps: usize) -> String {
    format!("session {session_id} (agent {agent_id}), {steps} steps\n")
}

/// One step's line of a session as plain text: index, time, kind, the
/// chain hash's start, the content on one line
/// ([`cairn_core::thinking::one_line`]), and whether it is flagged.
pub fn text_line(r: &StepRecord) -> String {
    let s = &r.step;
    format!(
        "[{}] {} {:<12} {}  {}{}\n",
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
    )
}

/// Where a step goes in its session's audit trail: its turn, its number
/// within the turn and its index. A step record has them, and so does a
/// step already rendered for an answer ([`Rendered`]), so that an answer
/// can drop each record once its piece is written.
pub trait TurnStep {
    /// The turn id, `None` for a step recorded without one.
    fn turn_id(&self) -> Option<&str>;
    /// The step's number within its turn, if it has one.
    fn turn_step(&self) -> Option<u64>;
    /// The step's index in its session.
    fn step_index(&self) -> u64;
}

impl TurnStep for StepRecord {
    fn turn_id(&self) -> Option<&str> {
        self.step.turn_id.as_deref()
    }
    fn turn_step(&self) -> Option<u64> {
        self.step.turn_step
    }
    fn step_index(&self) -> u64 {
        self.step.step_index
    }
}

impl<S: TurnStep> TurnStep for &S {
    fn turn_id(&self) -> Option<&str> {
        (*self).turn_id()
    }
    fn turn_step(&self) -> Option<u64> {
        (*self).turn_step()
    }
    fn step_index(&self) -> u64 {
        (*self).step_index()
    }
}

/// A session's steps (in the order they were read, by step index) as
/// its audit trail (seed 002's `getAuditTrail`): turns in the order of
/// their first step, each turn's steps by their number within the turn
/// (then by index, which breaks ties and orders steps recorded without a
/// number). Every step of a turn shares its turn id. The order is
/// [`crate::trail::TrailPlanner`]'s, which a streamed trail plans from the
/// steps' places alone.
pub fn in_turns<S: TurnStep>(steps: Vec<S>) -> Vec<Vec<S>> {
    let mut planner = crate::trail::TrailPlanner::default();
    for s in &steps {
        planner.push(s.turn_id().map(str::to_owned), s.turn_step());
    }
    let plan = planner.order();
    let mut slots: Vec<Option<S>> = steps.into_iter().map(Some).collect();
    let mut out: Vec<Vec<S>> = Vec::with_capacity(plan.ids.len());
    for (position, &i) in plan.order.iter().enumerate() {
        if plan.starts.get(out.len()) == Some(&position) {
            out.push(Vec::new());
        }
        if let (Some(turn), Some(step)) = (out.last_mut(), slots[i].take()) {
            turn.push(step);
        }
    }
    out
}

/// A step of an answer that is held whole, rendered as it was read: its
/// place in the trail and its `piece` of the answer (its Markdown line,
/// or its JSON), without the record, which can be dropped at once.
#[derive(Debug)]
pub struct Rendered<P> {
    /// The turn id.
    pub turn_id: Option<String>,
    /// Its number within the turn.
    pub turn_step: Option<u64>,
    /// Its index in the session.
    pub step_index: u64,
    /// When it was recorded (a turn's first step dates the turn).
    pub created_at: cairn_core::Timestamp,
    /// What the answer shows of it.
    pub piece: P,
}

impl<P> Rendered<P> {
    /// `record`'s place, with `piece`.
    pub fn new(record: &StepRecord, piece: P) -> Rendered<P> {
        let s = &record.step;
        Rendered {
            turn_id: s.turn_id.clone(),
            turn_step: s.turn_step,
            step_index: s.step_index,
            created_at: s.created_at,
            piece,
        }
    }
}

impl Rendered<String> {
    /// `record` with its line of seed 002's Markdown ([`markdown_line`]).
    pub fn markdown(record: &StepRecord) -> Rendered<String> {
        Rendered::new(record, markdown_line(record))
    }
}

impl<P> TurnStep for Rendered<P> {
    fn turn_id(&self) -> Option<&str> {
        self.turn_id.as_deref()
    }
    fn turn_step(&self) -> Option<u64> {
        self.turn_step
    }
    fn step_index(&self) -> u64 {
        self.step_index
    }
}

/// `2026-02-23T10:30:00Z`: seed 002's headings show seconds.
fn heading_time(created_at: &cairn_core::Timestamp) -> String {
    let full = created_at.to_string();
    format!("{}Z", full.get(..19).unwrap_or(&full))
}

/// One step as seed 002's `exportMarkdown` writes it: a blank line, then
/// `<label> <content>` on one line with the tool call, policy decision,
/// approval request and correction it links to (the content's control
/// characters escaped, [`terminal_safe`]).
pub fn markdown_line(r: &StepRecord) -> String {
    let s = &r.step;
    // On one line, with control characters escaped as `terminal_safe`
    // escapes them: a Markdown answer goes to files and terminals
    // (`curl ... | cat`) as well as to renderers, and a step's text must
    // not redraw what is around it.
    let content = match &s.content {
        Some(c) => terminal_safe(&cairn_core::thinking::one_line(c)).into_owned(),
        None if r.erased => "(erased)".to_owned(),
        None if !r.is_revealed(cairn_core::commit::Field::Content) => "(hidden)".to_owned(),
        None => String::new(),
    };
    // Seed 002 has five labels; a kind it has no label of (a decision,
    // a correction, a final answer...) gets the nearest, `[思考]`, and
    // is named after it, so that a reader tells it from musing.
    let label = s.kind.bracket_label();
    let mut out = if label == StepKind::Reasoning.bracket_label() && s.kind != StepKind::Reasoning {
        format!("\n{label} ({}) {content}", s.kind.as_str())
    } else {
        format!("\n{label} {content}")
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
    out
}

/// Seed 002's `exportMarkdown` of one turn, its steps in trail order: a
/// `## Turn <id> (<time>)` heading, then each step's [`markdown_line`].
pub fn rendered_turn_markdown(steps: &[Rendered<String>]) -> String {
    let Some(first) = steps.first() else {
        return String::new();
    };
    let mut out = turn_heading(first.turn_id.as_deref(), &first.created_at);
    for s in steps {
        out.push_str(&s.piece);
    }
    out
}

/// A turn's heading in seed 002's Markdown, dated by its first step:
/// `## Turn <id> (<time>)`, or `## Steps outside any turn (<time>)`.
pub fn turn_heading(turn_id: Option<&str>, first_created_at: &cairn_core::Timestamp) -> String {
    let when = heading_time(first_created_at);
    match turn_id {
        Some(id) => format!("## Turn {id} ({when})\n"),
        None => format!("## Steps outside any turn ({when})\n"),
    }
}

/// The title of a whole session's Markdown: `# Session <id>`; each turn
/// follows it after a blank line ([`rendered_markdown`]).
pub fn session_title(session_id: &str) -> String {
    format!("# Session {session_id}\n")
}

/// Seed 002's Markdown of a whole session, its steps rendered as they
/// were read: a `# Session` title, then every turn as
/// [`rendered_turn_markdown`] renders it, in trail order.
pub fn rendered_markdown(session_id: &str, steps: Vec<Rendered<String>>) -> String {
    let mut out = session_title(session_id);
    for turn in in_turns(steps) {
        out.push('\n');
        out.push_str(&rendered_turn_markdown(&turn));
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

    /// A whole session's Markdown from its records.
    fn markdown(session_id: &str, steps: &[StepRecord]) -> String {
        rendered_markdown(session_id, steps.iter().map(Rendered::markdown).collect())
    }
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
        // A step's control characters are shown, not passed to whatever
        // prints the Markdown.
        let mut s = Step::new("tx", "acme", "a", "s", 0, "thinking", t).unwrap();
        s.content = Some("clear\u{1b}[2J\u{7} this".into());
        let line = markdown_line(&StepRecord::new(s, &[0; 32], prev));
        assert_eq!(line, "\n[思考] clear\\u{1b}[2J\\u{7} this\n");
    }

    /// Turns come in the order of their first step, steps recorded
    /// outside any turn make one turn of their own (in index order, whatever
    /// numbers they carry), and a turn's steps are ordered by their number
    /// within it, then by index (steps without a number last).
    #[test]
    fn steps_are_ordered_into_turns() {
        let t = Timestamp::parse_rfc3339("2026-02-23T10:30:00Z").unwrap();
        let places = [
            (Some("b"), Some(2)),
            (None, Some(5)),
            (Some("a"), None),
            (Some("b"), Some(1)),
            (Some("a"), Some(7)),
            (None, Some(1)),
            (Some("b"), None),
            (Some("a"), Some(7)),
        ];
        let steps: Vec<Rendered<usize>> = places
            .iter()
            .enumerate()
            .map(|(i, (turn, number))| Rendered {
                turn_id: turn.map(str::to_owned),
                turn_step: *number,
                step_index: i as u64,
                created_at: t,
                piece: i,
            })
            .collect();
        let order: Vec<Vec<usize>> = in_turns(steps)
            .into_iter()
            .map(|turn| turn.into_iter().map(|s| s.piece).collect())
            .collect();
        assert_eq!(order, [vec![3, 0, 6], vec![1, 5], vec![4, 7, 2]]);
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
