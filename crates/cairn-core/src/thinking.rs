//! Seed 002's `parseThinking`: free-form thinking text split into
//! structured steps, one per phase (`thinking`, `plan`,
//! `waiting_approval`, `execute`, `error`).
//!
//! The rules, in order:
//!
//! 1. **Bracket markers.** `[思考]`, `[計画]`, `[承認待ち]`, `[実行]` and
//!    `[エラー]` (and their English phase names in brackets, `[thinking]`,
//!    `[plan]`, `[waiting_approval]`, `[execute]`, `[error]`, in any case)
//!    each start a step of their phase that runs to the next marker. Text
//!    before the first marker goes through the rules below.
//! 2. **Plans.** A line with a plan keyword (`plan`, `steps`, `手順`)
//!    followed by numbered (`1.`, `2)`) or bulleted (`-`, `*`, `•`, `・`)
//!    lines starts a plan; the keyword line and its list lines are one
//!    `plan` step. List lines continue the plan across blank lines; any
//!    other line ends it.
//! 3. **Errors.** Other lines containing `error`, `failed` (any case),
//!    `エラー` or `失敗` are `error`.
//! 4. **Default.** Everything else is `thinking`.
//!
//! Consecutive lines of one phase form one step; a blank line ends a step.
//! Content is trimmed; nothing else is changed or dropped (a property test
//! checks that every non-blank character of the input outside the markers
//! is in the output, in order).

use crate::kind::StepKind;

/// One step parsed from thinking text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedStep {
    /// The phase, in seed 002's spelling (`thinking`, `plan`,
    /// `waiting_approval`, `execute`, `error`): record it as the step type
    /// and Cairn keeps this label.
    pub phase: &'static str,
    /// The canonical kind the phase maps to.
    pub kind: StepKind,
    /// The step's text, trimmed.
    pub content: String,
}

const PHASES: [(&str, &str, StepKind); 5] = [
    ("[思考]", "thinking", StepKind::Reasoning),
    ("[計画]", "plan", StepKind::Plan),
    ("[承認待ち]", "waiting_approval", StepKind::WaitingApproval),
    ("[実行]", "execute", StepKind::Action),
    ("[エラー]", "error", StepKind::Error),
];

fn phase(index: usize) -> (&'static str, StepKind) {
    let (_, name, kind) = PHASES[index];
    (name, kind)
}

const THINKING: usize = 0;
const PLAN: usize = 1;
const ERROR: usize = 4;

/// The marker at the start of `text`, if any: (phase index, its length).
fn marker_at(text: &str) -> Option<(usize, usize)> {
    if !text.starts_with('[') {
        return None;
    }
    for (i, (japanese, english, _)) in PHASES.iter().enumerate() {
        if text.starts_with(japanese) {
            return Some((i, japanese.len()));
        }
        let bracketed = english.len() + 2;
        if text
            .get(1..bracketed - 1)
            .is_some_and(|name| name.eq_ignore_ascii_case(english))
            && text.as_bytes().get(bracketed - 1) == Some(&b']')
        {
            return Some((i, bracketed));
        }
    }
    None
}

/// A text that splits into more steps than the caller allows
/// ([`parse_thinking_at_most`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManySteps {
    /// The most steps that were allowed.
    pub max: usize,
}

impl std::fmt::Display for TooManySteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the thinking text splits into more than {} steps (one per phase; a blank line ends each)",
            self.max
        )
    }
}

impl std::error::Error for TooManySteps {}

/// Splits `text` into steps by the rules of the module docs.
pub fn parse_thinking(text: &str) -> Vec<ParsedStep> {
    // No text has more than usize::MAX steps: the limit is never reached.
    parse_thinking_at_most(text, usize::MAX).unwrap_or_default()
}

/// [`parse_thinking`], stopping as soon as `text` gives more than `max`
/// steps: a caller that must bound what one request costs (each step is
/// recorded) learns it without building them all, and the work and memory
/// spent are bounded by `max` and the text's length.
pub fn parse_thinking_at_most(text: &str, max: usize) -> Result<Vec<ParsedStep>, TooManySteps> {
    let mut steps = Steps {
        list: Vec::new(),
        max,
    };
    // Segments between markers: (the marker's phase, or None before the
    // first marker, and the text up to the next marker).
    let mut segment_start = 0;
    let mut segment_phase: Option<usize> = None;
    let mut i = 0;
    while i < text.len() {
        if let Some((p, len)) = marker_at(&text[i..]) {
            push_segment(&mut steps, segment_phase, &text[segment_start..i])?;
            segment_phase = Some(p);
            segment_start = i + len;
            i += len;
            continue;
        }
        i += text[i..].chars().next().map_or(1, char::len_utf8);
    }
    push_segment(&mut steps, segment_phase, &text[segment_start..])?;
    Ok(steps.list)
}

/// The steps parsed so far, and how many there may be.
struct Steps {
    list: Vec<ParsedStep>,
    max: usize,
}

impl Steps {
    fn push(&mut self, p: usize, content: &str) -> Result<(), TooManySteps> {
        if content.is_empty() {
            return Ok(());
        }
        if self.list.len() >= self.max {
            return Err(TooManySteps { max: self.max });
        }
        let (name, kind) = phase(p);
        self.list.push(ParsedStep {
            phase: name,
            kind,
            content: content.to_owned(),
        });
        Ok(())
    }
}

fn push_segment(steps: &mut Steps, marker: Option<usize>, body: &str) -> Result<(), TooManySteps> {
    match marker {
        Some(p) => steps.push(p, body.trim()),
        None => parse_lines(steps, body),
    }
}

/// A numbered (`1.`, `12)`) or bulleted (`-`, `*`, `•`, `・`) line.
fn is_list_item(line: &str) -> bool {
    let line = line.trim_start();
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 {
        let rest = &line[digits..];
        return (rest.starts_with('.') || rest.starts_with(')'))
            && rest[1..].chars().next().is_none_or(char::is_whitespace);
    }
    if line.starts_with('・') || line.starts_with('•') {
        return true;
    }
    (line.starts_with('-') || line.starts_with('*'))
        && line[1..].chars().next().is_some_and(char::is_whitespace)
}

fn has_plan_keyword(line: &str) -> bool {
    let lower = line.to_lowercase();
    lower.contains("plan") || lower.contains("steps") || line.contains("手順")
}

fn has_error_word(line: &str) -> bool {
    let lower = line.to_lowercase();
    lower.contains("error")
        || lower.contains("failed")
        || line.contains("エラー")
        || line.contains("失敗")
}

fn parse_lines(steps: &mut Steps, body: &str) -> Result<(), TooManySteps> {
    // The lines are walked, never collected: a text of blank lines would
    // otherwise cost 16 bytes of memory for each of its bytes.
    let mut lines = body.lines();
    let mut current: Option<(usize, Vec<&str>)> = None;
    let mut in_plan = false;
    let flush = |steps: &mut Steps, current: &mut Option<(usize, Vec<&str>)>| match current.take() {
        Some((p, block)) => steps.push(p, block.join("\n").trim()),
        None => Ok(()),
    };
    while let Some(line) = lines.next() {
        if line.trim().is_empty() {
            flush(steps, &mut current)?;
            continue;
        }
        let p = if in_plan && is_list_item(line) {
            PLAN
        } else if has_plan_keyword(line)
            && lines
                .clone()
                .find(|l| !l.trim().is_empty())
                .is_some_and(is_list_item)
        {
            // A plan starts: its keyword line opens a new step even after
            // another plan.
            flush(steps, &mut current)?;
            in_plan = true;
            PLAN
        } else {
            in_plan = false;
            if has_error_word(line) {
                ERROR
            } else {
                THINKING
            }
        };
        match &mut current {
            Some((cp, block)) if *cp == p => block.push(line.trim_end()),
            _ => {
                flush(steps, &mut current)?;
                current = Some((p, vec![line.trim_end()]));
            }
        }
    }
    flush(steps, &mut current)
}

/// A step's content on one line for seed 002's Markdown: lines joined by a
/// space, list items set apart by two (`1. a  2. b`). A lone carriage
/// return ends a line too, as CommonMark reads one: left in, it would let
/// a step's text start a line of its own in the trail (a heading that
/// looks like another turn's).
pub fn one_line(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    for line in content
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        if !out.is_empty() {
            out.push_str(if is_list_item(line) { "  " } else { " " });
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phases(text: &str) -> Vec<(&'static str, String)> {
        parse_thinking(text)
            .into_iter()
            .map(|s| (s.phase, s.content))
            .collect()
    }

    #[test]
    fn bracket_markers_come_first() {
        let text = "[思考] The user asked me to check system status.\n[計画] 1. Call check_credits\n2. Call check_inbox\n[実行] check_credits -> $2.50 remaining\n[承認待ち] Awaiting approval for send_email\n[エラー] check_inbox failed: timeout";
        assert_eq!(
            phases(text),
            vec![
                (
                    "thinking",
                    "The user asked me to check system status.".into()
                ),
                ("plan", "1. Call check_credits\n2. Call check_inbox".into()),
                ("execute", "check_credits -> $2.50 remaining".into()),
                (
                    "waiting_approval",
                    "Awaiting approval for send_email".into()
                ),
                ("error", "check_inbox failed: timeout".into()),
            ]
        );
    }

    #[test]
    fn english_markers_and_text_before_the_first_marker() {
        assert_eq!(
            phases("Let me look.\n[PLAN] read the file\n[Error] it failed"),
            vec![
                ("thinking", "Let me look.".into()),
                ("plan", "read the file".into()),
                ("error", "it failed".into()),
            ]
        );
    }

    #[test]
    fn plans_errors_and_thinking_without_markers() {
        let text = "The user wants a status report.\nI should check credits first.\n\nMy plan:\n1. Call check_credits\n2. Call check_inbox\n\nThe last call failed with an error.\nSo I will retry.";
        assert_eq!(
            phases(text),
            vec![
                (
                    "thinking",
                    "The user wants a status report.\nI should check credits first.".into()
                ),
                (
                    "plan",
                    "My plan:\n1. Call check_credits\n2. Call check_inbox".into()
                ),
                ("error", "The last call failed with an error.".into()),
                ("thinking", "So I will retry.".into()),
            ]
        );
    }

    #[test]
    fn japanese_heuristics() {
        let text =
            "状況を確認します。\n手順:\n・残高を確認\n・受信箱を確認\n残高の取得に失敗しました。";
        assert_eq!(
            phases(text),
            vec![
                ("thinking", "状況を確認します。".into()),
                ("plan", "手順:\n・残高を確認\n・受信箱を確認".into()),
                ("error", "残高の取得に失敗しました。".into()),
            ]
        );
    }

    #[test]
    fn a_list_without_a_plan_keyword_is_thinking() {
        assert_eq!(
            phases("Options:\n- wait\n- retry"),
            vec![("thinking", "Options:\n- wait\n- retry".into())]
        );
        assert_eq!(
            phases("no plan here"),
            vec![("thinking", "no plan here".into())]
        );
        assert!(parse_thinking("  \n\n [思考]  ").is_empty());
    }

    proptest::proptest! {
        /// Any text parses without panicking, and every non-blank
        /// character outside the markers survives, in order.
        #[test]
        fn nothing_is_lost(text in "(\\PC|\\[思考\\]|\\[計画\\]|\\[エラー\\]|\\[plan\\]|\n|1\\. |- |plan|error|失敗|手順){0,60}") {
            let steps = parse_thinking(&text);
            let strip_english = |s: &str| {
                let mut out = String::new();
                let mut i = 0;
                while i < s.len() {
                    if let Some((_, len)) = marker_at(&s[i..]) {
                        i += len;
                        continue;
                    }
                    let c = s[i..].chars().next().unwrap_or(' ');
                    out.push(c);
                    i += c.len_utf8();
                }
                out
            };
            let expected: String = strip_english(&text).chars().filter(|c| !c.is_whitespace()).collect();
            let got: String = steps.iter().flat_map(|s| s.content.chars()).filter(|c| !c.is_whitespace()).collect();
            proptest::prop_assert_eq!(got, expected);
            for s in &steps {
                proptest::prop_assert!(!s.content.is_empty());
                proptest::prop_assert_eq!(s.content.trim(), s.content.as_str());
            }
        }
    }

    proptest::proptest! {
        /// The bounded parse gives exactly the whole parse when it has at
        /// most `max` steps, and refuses it otherwise.
        #[test]
        fn at_most_is_the_whole_parse_or_a_refusal(
            text in "(\\PC|\\[思考\\]|\\[計画\\]|\\[plan\\]|\n|1\\. |- |plan|error){0,60}",
            max in 0usize..12,
        ) {
            let whole = parse_thinking(&text);
            match parse_thinking_at_most(&text, max) {
                Ok(steps) => proptest::prop_assert_eq!(steps, whole),
                Err(e) => {
                    proptest::prop_assert_eq!(e.max, max);
                    proptest::prop_assert!(whole.len() > max);
                }
            }
        }
    }

    #[test]
    fn a_text_of_many_paragraphs_is_refused_past_the_limit() {
        let text = "x\n\n".repeat(100_001);
        assert_eq!(
            parse_thinking_at_most(&text, 100_000),
            Err(TooManySteps { max: 100_000 })
        );
        assert_eq!(
            parse_thinking_at_most(&text, 100_001).map(|s| s.len()),
            Ok(100_001)
        );
        assert_eq!(parse_thinking_at_most("", 0), Ok(Vec::new()));
    }

    #[test]
    fn one_line_sets_list_items_apart() {
        assert_eq!(
            one_line("My plan:\n1. Call check_credits\n2. Call check_inbox"),
            "My plan:  1. Call check_credits  2. Call check_inbox"
        );
        assert_eq!(one_line("a\n  b\n\nc"), "a b c");
        assert_eq!(one_line("a\r## Turn forged\r\nb"), "a ## Turn forged b");
    }
}
