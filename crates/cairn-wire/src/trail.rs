//! A session's audit trail written as it is read (seed 002's turns, as
//! JSON or Markdown), for a reader that never holds the session: its
//! order planned first from each step's turn and number alone
//! ([`TrailPlanner`]), then each step written at its place in that order
//! ([`TurnsWriter`]). The server's streamed trails, turns and Markdown
//! replays and the CLI's write the same bytes through it.

use crate::render;
use cairn_core::commit::StepRecord;

/// Puts a session's steps into trail order ([`render::in_turns`]'s) from their
/// places alone, each step's turn id and number given in index order,
/// without the steps: what a reader that streams a trail plans before
/// it reads them. It holds 16 bytes a step and each distinct turn id
/// twice.
#[derive(Debug, Default)]
pub struct TrailPlanner {
    /// Each turn id's place among the turns (the order of first steps).
    turns: std::collections::HashMap<Option<String>, usize>,
    /// The turn ids, in that order.
    ids: Vec<Option<String>>,
    /// Each step's turn and number (a step without one after those with).
    keys: Vec<(usize, u64)>,
    /// The turn ids' bytes.
    id_bytes: usize,
}

/// A trail's order, planned by [`TrailPlanner`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrailOrder {
    /// The steps (by their place in the order they were given) in trail
    /// order.
    pub order: Vec<usize>,
    /// Where each turn's first step stands in `order`, ascending; the
    /// first is 0 (empty when there are no steps).
    pub starts: Vec<usize>,
    /// Each turn's id (`None`: the steps recorded outside any turn).
    pub ids: Vec<Option<String>>,
}

impl TrailPlanner {
    /// The next step (in index order) as a reader shown `level` of it
    /// sees it: its turn id and number, each left out where the level
    /// hides it ([`cairn_core::detail::DetailLevel::of`]; `generic` hides
    /// turn ids, so such a reader's trail is one turn of steps outside
    /// any), as the steps it then writes, redacted, will show.
    pub fn push_shown(
        &mut self,
        turn_id: Option<String>,
        turn_step: Option<u64>,
        level: Option<cairn_core::detail::DetailLevel>,
    ) {
        use cairn_core::commit::Field;
        use cairn_core::detail::DetailLevel;
        let shown = |field: Field| level.is_none_or(|level| DetailLevel::of(field) <= level);
        self.push(
            turn_id.filter(|_| shown(Field::TurnId)),
            turn_step.filter(|_| shown(Field::TurnStep)),
        );
    }

    /// The places of the steps at `expected` (a chunk of positions in
    /// index order), as the store read them
    /// ([`cairn_store::LedgerStore::turn_places_at`]), each pushed as a
    /// reader shown `level` sees it ([`TrailPlanner::push_shown`]); nothing
    /// is pushed and the first position that holds no step is the error
    /// when one is missing.
    pub fn push_places(
        &mut self,
        expected: &[u64],
        places: Vec<cairn_store::TurnPlace>,
        level: Option<cairn_core::detail::DetailLevel>,
    ) -> Result<(), u64> {
        let read = places
            .iter()
            .zip(expected)
            .take_while(|(place, seq)| place.seq == **seq)
            .count();
        if let Some(&missing) = expected.get(read) {
            return Err(missing);
        }
        for place in places {
            self.push_shown(place.turn_id, place.turn_step, level);
        }
        Ok(())
    }

    /// The next step (in index order): its turn id and its number within
    /// the turn. A number orders steps within their turn only: steps
    /// outside any turn (no turn id, or one the reader's level hides)
    /// keep their index order whatever numbers they carry.
    pub fn push(&mut self, turn_id: Option<String>, turn_step: Option<u64>) {
        let turn_step = turn_step.filter(|_| turn_id.is_some());
        let turn = match self.turns.get(&turn_id) {
            Some(&turn) => turn,
            None => {
                let turn = self.ids.len();
                self.id_bytes += turn_id.as_ref().map_or(0, String::len);
                self.ids.push(turn_id.clone());
                self.turns.insert(turn_id, turn);
                turn
            }
        };
        self.keys.push((turn, turn_step.unwrap_or(u64::MAX)));
    }

    /// How many turns were seen.
    pub fn turns(&self) -> usize {
        self.ids.len()
    }

    /// The bytes of the turn ids seen (each is held twice).
    pub fn turn_id_bytes(&self) -> usize {
        self.id_bytes
    }

    /// The trail's order: turns by their first step, each turn's steps by
    /// number, then by the order they were given (steps outside any turn
    /// by the order they were given alone).
    pub fn order(self) -> TrailOrder {
        let TrailPlanner { ids, keys, .. } = self;
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by_key(|&i| (keys[i].0, keys[i].1, i));
        let mut starts = Vec::with_capacity(ids.len());
        for (position, &i) in order.iter().enumerate() {
            if starts.len() <= keys[i].0 {
                starts.push(position);
            }
        }
        TrailOrder { order, starts, ids }
    }
}

/// How a stream of turns is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnsForm {
    /// A session's audit trail as JSON: `{"session_id":…,"turns":[{"turn_id":…,"started_at":…,"steps":[…]},…]}`,
    /// each step as [`crate::wire::StepOut`].
    TrailJson,
    /// A whole session in seed 002's Markdown: its title, then each turn
    /// after a blank line ([`render::rendered_markdown`]).
    TrailMarkdown,
    /// One turn as JSON: `{"turn_id":…,"started_at":…,"steps":[…]}`.
    TurnJson,
    /// One turn in seed 002's Markdown ([`render::rendered_turn_markdown`]).
    TurnMarkdown,
}

impl TurnsForm {
    /// Whether the form is JSON (else Markdown).
    pub fn is_json(self) -> bool {
        matches!(self, TurnsForm::TrailJson | TurnsForm::TurnJson)
    }

    /// The answer's content type.
    pub fn content_type(self) -> &'static str {
        if self.is_json() {
            "application/json"
        } else {
            "text/markdown; charset=utf-8"
        }
    }
}

/// Writes a stream of turns: its opening, each step at its position in
/// the planned order with what comes before it (a comma, or its turn's
/// opening or heading), and its closing. Steps must come in the planned
/// order, each checked to be of the turn the plan places it in.
#[derive(Debug, Clone)]
pub struct TurnsWriter {
    form: TurnsForm,
    /// Where each turn's first step stands in the order, ascending.
    starts: Vec<u64>,
    /// Each turn's id.
    ids: Vec<Option<String>>,
}

impl TurnsWriter {
    /// A writer of `plan`'s turns (its order is the caller's to follow).
    pub fn new(form: TurnsForm, plan: &TrailOrder) -> TurnsWriter {
        TurnsWriter {
            form,
            starts: plan.starts.iter().map(|&p| p as u64).collect(),
            ids: plan.ids.clone(),
        }
    }

    /// Its form.
    pub fn form(&self) -> TurnsForm {
        self.form
    }

    /// The turn of the step at `position`, and whether it starts there.
    pub fn turn_at(&self, position: u64) -> (usize, bool) {
        let turn = self
            .starts
            .partition_point(|&start| start <= position)
            .saturating_sub(1);
        (turn, self.starts.get(turn) == Some(&position))
    }

    /// The turn of the step at `position` of the order (`seq` its log
    /// position) and whether it starts there, once `record` is checked to
    /// be of that turn (a trail must not mix turns: only a store changed
    /// under its reader gets a step of another).
    pub fn place(
        &self,
        position: u64,
        seq: u64,
        record: &StepRecord,
    ) -> Result<(usize, bool), String> {
        let (turn, starts) = self.turn_at(position);
        if self.ids.get(turn).map(Option::as_deref) != Some(record.step.turn_id.as_deref()) {
            return Err(format!(
                "the step at log position {seq} is not of the turn its row placed it in"
            ));
        }
        Ok((turn, starts))
    }

    /// What comes before the first step (`session_id` is the trail's).
    pub fn opening(&self, session_id: &str) -> Vec<u8> {
        match self.form {
            TurnsForm::TrailJson => {
                let mut opening = b"{\"session_id\":".to_vec();
                opening.extend(serde_json::to_vec(session_id).unwrap_or_default());
                opening.extend_from_slice(b",\"turns\":[");
                opening
            }
            TurnsForm::TrailMarkdown => render::session_title(session_id).into_bytes(),
            TurnsForm::TurnJson | TurnsForm::TurnMarkdown => Vec::new(),
        }
    }

    /// Writes the step at `position` of the order (`seq` its log
    /// position), after what comes before it; a step that is not of the
    /// turn the plan places it in is refused ([`TurnsWriter::place`]).
    pub fn write_step(
        &self,
        position: u64,
        seq: u64,
        record: &StepRecord,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let (turn, starts) = self.place(position, seq, record)?;
        let turn_id = record.step.turn_id.as_deref();
        if self.form.is_json() {
            if starts {
                if turn > 0 {
                    out.extend_from_slice(b"]},");
                }
                out.extend_from_slice(b"{\"turn_id\":");
                serde_json::to_writer(&mut *out, &turn_id).map_err(|e| e.to_string())?;
                out.extend_from_slice(b",\"started_at\":");
                serde_json::to_writer(&mut *out, &record.step.created_at.to_string())
                    .map_err(|e| e.to_string())?;
                out.extend_from_slice(b",\"steps\":[");
            } else {
                out.push(b',');
            }
            return serde_json::to_writer(&mut *out, &crate::wire::step_out(seq, record))
                .map_err(|e| e.to_string());
        }
        if starts {
            if self.form == TurnsForm::TrailMarkdown {
                out.push(b'\n');
            }
            out.extend_from_slice(
                render::turn_heading(turn_id, &record.step.created_at).as_bytes(),
            );
        }
        out.extend_from_slice(render::markdown_line(record).as_bytes());
        Ok(())
    }

    /// What comes after the last step, `written` steps in all.
    pub fn closing(&self, written: u64) -> Vec<u8> {
        match self.form {
            // The last turn's steps and object, then the turns and the trail.
            TurnsForm::TrailJson if written > 0 => b"]}]}".to_vec(),
            TurnsForm::TrailJson | TurnsForm::TurnJson => b"]}".to_vec(),
            TurnsForm::TrailMarkdown | TurnsForm::TurnMarkdown => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{Rendered, TurnStep, in_turns};

    /// A whole session's Markdown from its records, built whole.
    fn markdown(session_id: &str, steps: &[StepRecord]) -> String {
        render::rendered_markdown(session_id, steps.iter().map(Rendered::markdown).collect())
    }

    /// A record with its place among those written.
    struct Placed<'a>((usize, &'a StepRecord));

    impl TurnStep for Placed<'_> {
        fn turn_id(&self) -> Option<&str> {
            self.0.1.turn_id()
        }
        fn turn_step(&self) -> Option<u64> {
            self.0.1.turn_step()
        }
        fn step_index(&self) -> u64 {
            self.0.1.step_index()
        }
    }

    proptest::proptest! {
        /// The planned order is the trail's by definition: turns by the
        /// place of their first step, each turn's steps by number (none
        /// last; outside any turn, none counts), then by index; each turn
        /// starts where the last ends.
        #[test]
        fn planned_order_is_the_trails(
            places in proptest::collection::vec(
                (proptest::option::of(0u8..4), proptest::option::of(0u64..6)),
                0..80,
            )
        ) {
            let mut planner = TrailPlanner::default();
            for (turn, number) in &places {
                planner.push(turn.map(|t| format!("turn-{t}")), *number);
            }
            let plan = planner.order();
            let mut first: Vec<Option<u8>> = Vec::new();
            for (turn, _) in &places {
                if !first.contains(turn) {
                    first.push(*turn);
                }
            }
            let turn_of = |i: usize| first.iter().position(|t| *t == places[i].0).unwrap();
            let mut expected: Vec<usize> = (0..places.len()).collect();
            // A number orders steps within a turn only: outside any turn,
            // index order.
            let number = |i: usize| places[i].1.filter(|_| places[i].0.is_some());
            expected.sort_by_key(|&i| (turn_of(i), number(i).unwrap_or(u64::MAX), i));
            proptest::prop_assert_eq!(&plan.order, &expected);
            let ids: Vec<Option<String>> =
                first.iter().map(|t| t.map(|t| format!("turn-{t}"))).collect();
            proptest::prop_assert_eq!(&plan.ids, &ids);
            let starts: Vec<usize> = (0..expected.len())
                .filter(|&p| p == 0 || turn_of(expected[p]) != turn_of(expected[p - 1]))
                .collect();
            proptest::prop_assert_eq!(&plan.starts, &starts);
            // The steps grouped into turns are the same steps in that order.
            let grouped: Vec<usize> = in_turns(
                places
                    .iter()
                    .enumerate()
                    .map(|(i, (turn, number))| Rendered {
                        turn_id: turn.map(|t| format!("turn-{t}")),
                        turn_step: *number,
                        step_index: i as u64,
                        created_at: cairn_core::Timestamp::from_micros(0).unwrap(),
                        piece: i,
                    })
                    .collect(),
            )
            .into_iter()
            .flatten()
            .map(|s| s.piece)
            .collect();
            proptest::prop_assert_eq!(grouped, expected);
        }
    }

    /// A reader shown `generic` sees no turn ids: the whole session is
    /// steps outside any turn, in index order, though their numbers within
    /// their (hidden) turns are shown (a hostile review's finding: they
    /// had been ordered by those numbers).
    #[test]
    fn a_generic_readers_trail_is_in_index_order() {
        use cairn_core::detail::DetailLevel;
        let places = [
            (Some("q"), Some(1)),
            (None, None),
            (Some("r"), Some(0)),
            (Some("q"), Some(0)),
            (None, None),
            (Some("r"), Some(1)),
        ];
        let plan = |level| {
            let mut planner = TrailPlanner::default();
            for (turn, number) in places {
                planner.push_shown(turn.map(str::to_owned), number, level);
            }
            planner.order()
        };
        let generic = plan(Some(DetailLevel::Generic));
        assert_eq!(generic.order, [0, 1, 2, 3, 4, 5]);
        assert_eq!(generic.ids, [None]);
        let full = plan(Some(DetailLevel::Full));
        assert_eq!(full.order, [3, 0, 1, 4, 2, 5]);
    }

    /// A stream written step by step in the planned order is the trail
    /// built whole: as JSON (the turns of [`crate::wire::turn_out`]) and
    /// as seed 002's Markdown, for the session and for each turn.
    #[test]
    fn a_written_stream_is_the_trail_built_whole() {
        use cairn_core::record::Step;
        let t = cairn_core::Timestamp::parse_rfc3339("2026-02-23T10:30:00Z").unwrap();
        let places = [
            (Some("b"), Some(2)),
            (None, None),
            (Some("a"), None),
            (Some("b"), Some(1)),
            (Some("a"), Some(7)),
            (None, None),
            (Some("b"), None),
        ];
        let mut prev = cairn_core::Hash::ZERO;
        let mut records = Vec::new();
        for (i, (turn, number)) in places.iter().enumerate() {
            let mut s = Step::new(format!("t{i}"), "acme", "a", "s", i as u64, "plan", t).unwrap();
            s.content = Some(format!("step \"{i}\""));
            s.turn_id = turn.map(str::to_owned);
            s.turn_step = *number;
            let r = StepRecord::new(s, &[0; 32], prev);
            prev = r.hash;
            records.push(r);
        }
        let seq = |i: usize| 100 + i as u64;
        let write = |form: TurnsForm, records: &[&StepRecord], indexes: &[usize]| {
            let mut planner = TrailPlanner::default();
            for r in records {
                planner.push(r.step.turn_id.clone(), r.step.turn_step);
            }
            let plan = planner.order();
            let writer = TurnsWriter::new(form, &plan);
            let mut out = writer.opening("s");
            for (position, &i) in plan.order.iter().enumerate() {
                writer
                    .write_step(position as u64, seq(indexes[i]), records[i], &mut out)
                    .unwrap();
            }
            out.extend(writer.closing(plan.order.len() as u64));
            String::from_utf8(out).unwrap()
        };
        let all: Vec<&StepRecord> = records.iter().collect();
        let indexes: Vec<usize> = (0..records.len()).collect();
        // The trail built whole: the records grouped by `in_turns`, each
        // turn as JSON ({turn_id, started_at, steps}) and as Markdown.
        let whole: Vec<Vec<(usize, &StepRecord)>> =
            in_turns(records.iter().enumerate().map(Placed).collect())
                .into_iter()
                .map(|turn| turn.into_iter().map(|Placed(placed)| placed).collect())
                .collect();
        let turn_json = |turn: &[(usize, &StepRecord)]| {
            let (_, first) = turn[0];
            serde_json::json!({
                "turn_id": first.step.turn_id,
                "started_at": first.step.created_at.to_string(),
                "steps": turn
                    .iter()
                    .map(|&(i, r)| crate::wire::step_to_json(seq(i), r))
                    .collect::<Vec<_>>(),
            })
        };
        let turn_markdown = |turn: &[(usize, &StepRecord)]| {
            let lines: Vec<Rendered<String>> =
                turn.iter().map(|&(_, r)| Rendered::markdown(r)).collect();
            render::rendered_turn_markdown(&lines)
        };
        let turns: Vec<_> = whole.iter().map(|turn| turn_json(turn)).collect();
        let json: serde_json::Value =
            serde_json::from_str(&write(TurnsForm::TrailJson, &all, &indexes)).unwrap();
        assert_eq!(json, serde_json::json!({"session_id": "s", "turns": turns}));
        assert_eq!(
            write(TurnsForm::TrailMarkdown, &all, &indexes),
            markdown("s", &records)
        );
        for turn in &whole {
            let Some(id) = turn[0].1.step.turn_id.as_deref() else {
                continue;
            };
            let (of_turn, at): (Vec<&StepRecord>, Vec<usize>) = records
                .iter()
                .enumerate()
                .filter(|(_, r)| r.step.turn_id.as_deref() == Some(id))
                .map(|(i, r)| (r, i))
                .unzip();
            let json: serde_json::Value =
                serde_json::from_str(&write(TurnsForm::TurnJson, &of_turn, &at)).unwrap();
            assert_eq!(json, turn_json(turn));
            assert_eq!(
                write(TurnsForm::TurnMarkdown, &of_turn, &at),
                turn_markdown(turn)
            );
        }
        // A reader shown less sees the steps redacted, and their trail as
        // the redacted steps give it (`generic` hides turn ids, not
        // numbers: one turn of steps outside any, by number).
        for level in [
            cairn_core::detail::DetailLevel::Generic,
            cairn_core::detail::DetailLevel::Detailed,
        ] {
            let mut redacted = records.clone();
            for r in &mut redacted {
                r.redact(level).unwrap();
            }
            let mut planner = TrailPlanner::default();
            for r in &records {
                planner.push_shown(r.step.turn_id.clone(), r.step.turn_step, Some(level));
            }
            let plan = planner.order();
            let writer = TurnsWriter::new(TurnsForm::TrailMarkdown, &plan);
            let mut out = writer.opening("s");
            for (position, &i) in plan.order.iter().enumerate() {
                writer
                    .write_step(position as u64, seq(i), &redacted[i], &mut out)
                    .unwrap();
            }
            assert_eq!(
                String::from_utf8(out).unwrap(),
                markdown("s", &redacted),
                "{level}"
            );
            assert_eq!(
                plan.ids.len(),
                if level == cairn_core::detail::DetailLevel::Generic {
                    1
                } else {
                    3
                }
            );
        }
        // No steps: a trail without turns, and no Markdown turn.
        assert_eq!(
            write(TurnsForm::TrailJson, &[], &[]),
            r#"{"session_id":"s","turns":[]}"#
        );
        assert_eq!(write(TurnsForm::TrailMarkdown, &[], &[]), "# Session s\n");
        // A step that is not of its planned turn is refused.
        let mut planner = TrailPlanner::default();
        planner.push(Some("a".into()), None);
        let writer = TurnsWriter::new(TurnsForm::TrailJson, &planner.order());
        assert!(
            writer
                .write_step(0, 1, &records[0], &mut Vec::new())
                .is_err()
        );
    }
}
