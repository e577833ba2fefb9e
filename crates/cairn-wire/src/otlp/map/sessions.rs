//! Mapped spans grouped into sessions: each session's agent and its steps
//! in recorded order ([`plan`]). Apart from the mapping of one span
//! because it is the only part that looks across spans.

use super::{MappedStep, SpanSteps, Unmappable};

/// One session's steps in recorded order, with its agent.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionPlan {
    /// The session.
    pub session_id: String,
    /// The agent every step is written as.
    pub agent_id: String,
    /// `(index of the span in the request's mapped list, step)`, ordered.
    pub steps: Vec<(usize, MappedStep)>,
}

/// Groups mapped spans by session (sessions in order of first appearance)
/// and orders each session's steps by time (a span's opening steps at its
/// start, closing steps at its end), then span id, then position in the
/// span. The agent of a session is `bound_agent` if the API key is bound
/// to one; otherwise the agent named by the session's earliest agent span
/// (`invoke_agent`, `create_agent`, `AGENT`), else by any span of it, else
/// the resource's `service.name`, else `otel`.
pub fn plan(
    spans: Vec<Result<SpanSteps, Unmappable>>,
    bound_agent: Option<&str>,
) -> Vec<SessionPlan> {
    // Sessions in order of first appearance, with their spans.
    let mut order: Vec<(String, Vec<usize>)> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        let Ok(s) = s else { continue };
        let at = *index.entry(s.session_id.as_str()).or_insert_with(|| {
            order.push((s.session_id.clone(), Vec::new()));
            order.len() - 1
        });
        order[at].1.push(i);
    }
    drop(index);
    let agents: Vec<String> = order
        .iter()
        .map(|(_, idx)| {
            if let Some(a) = bound_agent {
                return a.to_owned();
            }
            let of = |i: &usize| spans[*i].as_ref().ok();
            let named = |want_agent_span: bool| {
                idx.iter()
                    .filter_map(of)
                    .filter(|s| {
                        s.agent
                            .as_ref()
                            .is_some_and(|(_, is)| *is || !want_agent_span)
                    })
                    .min_by(|a, b| (a.start, &a.span_hex).cmp(&(b.start, &b.span_hex)))
                    .and_then(|s| s.agent.as_ref().map(|(a, _)| a.clone()))
            };
            named(true)
                .or_else(|| named(false))
                .or_else(|| idx.iter().filter_map(of).find_map(|s| s.service.clone()))
                .unwrap_or_else(|| "otel".to_owned())
        })
        .collect();
    // Move the steps out (no copies), keeping each span's id for ordering.
    let mut taken: Vec<(String, Vec<MappedStep>)> = spans
        .into_iter()
        .map(|s| match s {
            Ok(s) => (s.span_hex, s.steps),
            Err(_) => (String::new(), Vec::new()),
        })
        .collect();
    order
        .into_iter()
        .zip(agents)
        .map(|((session_id, idx), agent_id)| {
            let mut steps: Vec<(usize, MappedStep)> = Vec::new();
            for i in idx {
                steps.extend(std::mem::take(&mut taken[i].1).into_iter().map(|s| (i, s)));
            }
            steps.sort_by(|(ia, a), (ib, b)| {
                (a.at, taken[*ia].0.as_str(), a.position).cmp(&(
                    b.at,
                    taken[*ib].0.as_str(),
                    b.position,
                ))
            });
            SessionPlan {
                session_id,
                agent_id,
                steps,
            }
        })
        .collect()
}
