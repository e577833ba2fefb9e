//! One canonical vocabulary of step kinds covering all five source systems.
//!
//! Each seed spells its kinds its own way: seed 000 has twelve PascalCase
//! step types (`ToolCall`, `PlanStep`, `FinalAnswer`, ...), seed 001 four
//! record types (`plan`, `analysis`, `decision`, `reflection`), seed 002
//! five phases (`thinking`, `plan`, `waiting_approval`, `execute`, `error`)
//! and their bracket labels (`思考`, ...), seed 004 component types and
//! event types (`observation`, `THOUGHT_START`, `DMA_RESULTS`, ...). Every
//! spelling parses to one [`StepKind`]; the caller keeps the original text
//! (it is committed in the step digest as `step_type_original`).

use std::fmt;

/// The canonical kind of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StepKind {
    /// The agent observes data or its environment (000 `Observation`, 004
    /// `observation` / `THOUGHT_START`).
    Observation,
    /// Environmental state at decision time (004 `context` /
    /// `SNAPSHOT_AND_CONTEXT`).
    Context,
    /// A hypothesis about the data (000 `Hypothesis`).
    Hypothesis,
    /// Free-form internal reasoning (000 `Reasoning`, 002 `thinking`).
    Reasoning,
    /// A mid-phase observation of what was learned (001 `analysis`).
    Analysis,
    /// The evaluations behind a choice (004 `rationale`, `DMA_RESULTS`,
    /// `IDMA_RESULT`, `ASPDMA_RESULT`).
    Rationale,
    /// An ethical or policy check of a chosen action (004 `conscience`).
    Conscience,
    /// An intended trajectory or one step of it (000 `PlanStep`, 001 and 002
    /// `plan`).
    Plan,
    /// A choice between options (000 `Decision`, 001 `decision`).
    Decision,
    /// Waiting for a human or a policy (002 `waiting_approval`).
    WaitingApproval,
    /// The agent invokes a tool (000 `ToolCall`).
    ToolCall,
    /// A tool's result (000 `ToolResult`).
    ToolResult,
    /// An action taken and its outcome (000 `Action`, 002 `execute`, 004
    /// `action` / `ACTION_RESULT`).
    Action,
    /// An error (000 `Error`, 002 `error`).
    Error,
    /// A correction of an earlier step, which it references (000
    /// `Correction`).
    Correction,
    /// A summary of findings (000 `Summary`).
    Summary,
    /// What happened and what remains uncertain, at a task's close (001
    /// `reflection`).
    Reflection,
    /// The final output of the session (000 `FinalAnswer`).
    FinalAnswer,
}

/// Every kind, in declaration order.
pub const ALL_KINDS: [StepKind; 18] = [
    StepKind::Observation,
    StepKind::Context,
    StepKind::Hypothesis,
    StepKind::Reasoning,
    StepKind::Analysis,
    StepKind::Rationale,
    StepKind::Conscience,
    StepKind::Plan,
    StepKind::Decision,
    StepKind::WaitingApproval,
    StepKind::ToolCall,
    StepKind::ToolResult,
    StepKind::Action,
    StepKind::Error,
    StepKind::Correction,
    StepKind::Summary,
    StepKind::Reflection,
    StepKind::FinalAnswer,
];

impl StepKind {
    /// The canonical snake_case name, as written in digests and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Observation => "observation",
            StepKind::Context => "context",
            StepKind::Hypothesis => "hypothesis",
            StepKind::Reasoning => "reasoning",
            StepKind::Analysis => "analysis",
            StepKind::Rationale => "rationale",
            StepKind::Conscience => "conscience",
            StepKind::Plan => "plan",
            StepKind::Decision => "decision",
            StepKind::WaitingApproval => "waiting_approval",
            StepKind::ToolCall => "tool_call",
            StepKind::ToolResult => "tool_result",
            StepKind::Action => "action",
            StepKind::Error => "error",
            StepKind::Correction => "correction",
            StepKind::Summary => "summary",
            StepKind::Reflection => "reflection",
            StepKind::FinalAnswer => "final_answer",
        }
    }

    /// Parses any seed's spelling: the canonical names, seed 000's
    /// PascalCase, seed 004's event types, and seed 002's bracket labels
    /// (with or without brackets). Case, `_` and `-` are ignored for the
    /// Latin spellings.
    pub fn parse(label: &str) -> Option<StepKind> {
        let trimmed = label.trim();
        let bare = trimmed
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .unwrap_or(trimmed);
        match bare {
            "思考" => return Some(StepKind::Reasoning),
            "計画" => return Some(StepKind::Plan),
            "承認待ち" => return Some(StepKind::WaitingApproval),
            "実行" => return Some(StepKind::Action),
            "エラー" => return Some(StepKind::Error),
            _ => {}
        }
        let key: String = bare
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        Some(match key.as_str() {
            "observation" | "thoughtstart" => StepKind::Observation,
            "context" | "snapshotandcontext" => StepKind::Context,
            "hypothesis" => StepKind::Hypothesis,
            "reasoning" | "thinking" | "thought" => StepKind::Reasoning,
            "analysis" => StepKind::Analysis,
            "rationale" | "dmaresults" | "idmaresult" | "aspdmaresult" => StepKind::Rationale,
            "conscience" | "conscienceresult" => StepKind::Conscience,
            "plan" | "planstep" => StepKind::Plan,
            "decision" => StepKind::Decision,
            "waitingapproval" => StepKind::WaitingApproval,
            "toolcall" => StepKind::ToolCall,
            "toolresult" => StepKind::ToolResult,
            "action" | "execute" | "actionresult" => StepKind::Action,
            "error" => StepKind::Error,
            "correction" => StepKind::Correction,
            "summary" => StepKind::Summary,
            "reflection" => StepKind::Reflection,
            "finalanswer" => StepKind::FinalAnswer,
            _ => return None,
        })
    }

    /// Seed 000's PascalCase name, for its MCP tools and replay output.
    pub fn seed000_name(self) -> &'static str {
        match self {
            StepKind::Observation => "Observation",
            StepKind::Context => "Context",
            StepKind::Hypothesis => "Hypothesis",
            StepKind::Reasoning => "Reasoning",
            StepKind::Analysis => "Analysis",
            StepKind::Rationale => "Rationale",
            StepKind::Conscience => "Conscience",
            StepKind::Plan => "PlanStep",
            StepKind::Decision => "Decision",
            StepKind::WaitingApproval => "WaitingApproval",
            StepKind::ToolCall => "ToolCall",
            StepKind::ToolResult => "ToolResult",
            StepKind::Action => "Action",
            StepKind::Error => "Error",
            StepKind::Correction => "Correction",
            StepKind::Summary => "Summary",
            StepKind::Reflection => "Reflection",
            StepKind::FinalAnswer => "FinalAnswer",
        }
    }

    /// Seed 002's bracket label for the Markdown export. Kinds outside the
    /// five phases use the nearest phase: observations and analysis are
    /// thinking, tool calls and results are execution.
    pub fn bracket_label(self) -> &'static str {
        match self {
            StepKind::Plan => "[計画]",
            StepKind::WaitingApproval => "[承認待ち]",
            StepKind::Action | StepKind::ToolCall | StepKind::ToolResult => "[実行]",
            StepKind::Error => "[エラー]",
            _ => "[思考]",
        }
    }

    /// Seed 000's rule: these kinds are always embedded, whatever the
    /// sampling rate.
    pub fn always_embedded(self) -> bool {
        matches!(
            self,
            StepKind::Decision
                | StepKind::Action
                | StepKind::Error
                | StepKind::Correction
                | StepKind::FinalAnswer
        )
    }

    /// Seed 001's four record types, the only kinds a strict session takes.
    pub fn is_decision_trail_type(self) -> bool {
        matches!(
            self,
            StepKind::Plan | StepKind::Analysis | StepKind::Decision | StepKind::Reflection
        )
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_spelling_parses() {
        let cases = [
            ("ToolCall", StepKind::ToolCall),
            ("PlanStep", StepKind::Plan),
            ("FinalAnswer", StepKind::FinalAnswer),
            ("analysis", StepKind::Analysis),
            ("thinking", StepKind::Reasoning),
            ("execute", StepKind::Action),
            ("waiting_approval", StepKind::WaitingApproval),
            ("[承認待ち]", StepKind::WaitingApproval),
            ("エラー", StepKind::Error),
            ("THOUGHT_START", StepKind::Observation),
            ("SNAPSHOT_AND_CONTEXT", StepKind::Context),
            ("DMA_RESULTS", StepKind::Rationale),
            ("CONSCIENCE_RESULT", StepKind::Conscience),
            ("ACTION_RESULT", StepKind::Action),
            ("reflection", StepKind::Reflection),
        ];
        for (label, kind) in cases {
            assert_eq!(StepKind::parse(label), Some(kind), "{label}");
        }
        assert_eq!(StepKind::parse("Informational"), None);
        assert_eq!(StepKind::parse(""), None);
    }

    #[test]
    fn canonical_and_seed_names_round_trip() {
        for kind in ALL_KINDS {
            assert_eq!(StepKind::parse(kind.as_str()), Some(kind));
            assert_eq!(StepKind::parse(kind.seed000_name()), Some(kind));
        }
    }
}
