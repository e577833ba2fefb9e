//! The session listing's query, built once for both backends so that they
//! filter and order alike (only the placeholder syntax differs).
//!
//! Every clause is an index range or an indexed lookup: the org and the
//! order come from `sessions_listing (org, started_at, session_id)` (or
//! `sessions_by_agent` for one agent), a page starts strictly after its
//! cursor (a row-value comparison, so a deep page costs what the first
//! does), a kind is checked per candidate session through
//! `entries_session_kinds (sid, kind)`, and flagged sessions come from the
//! small partial index `entries_flagged`.

use crate::SessionFilter;

/// A value bound into the listing query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListParam {
    /// An integer (org id, microseconds, limit).
    Int(i64),
    /// A string (agent, kind, session id).
    Text(String),
}

/// The listing's SQL and its parameters, in order. `placeholder(n)` writes
/// the n-th parameter's placeholder (1-based). The columns are
/// `session_id, agent_id, started_at, sid, sealed`.
pub(crate) fn session_listing_query(
    org: i64,
    filter: &SessionFilter,
    limit: usize,
    placeholder: fn(usize) -> String,
) -> (String, Vec<ListParam>) {
    let mut params = vec![ListParam::Int(org)];
    let mut bind = |value: ListParam| {
        params.push(value);
        placeholder(params.len())
    };
    let mut sql = String::from(
        "SELECT s.session_id, s.agent_id, s.started_at, s.sid,
           EXISTS (SELECT 1 FROM entries x WHERE x.sid = s.sid AND x.type = 'seal')
         FROM sessions s WHERE s.org = ",
    );
    sql.push_str(&placeholder(1));
    if let Some(agent) = &filter.agent_id {
        let p = bind(ListParam::Text(agent.clone()));
        sql.push_str(&format!(" AND s.agent_id = {p}"));
    }
    if let Some(from) = filter.started_from {
        let p = bind(ListParam::Int(from.as_micros()));
        sql.push_str(&format!(" AND s.started_at >= {p}"));
    }
    if let Some(before) = filter.started_before {
        let p = bind(ListParam::Int(before.as_micros()));
        sql.push_str(&format!(" AND s.started_at < {p}"));
    }
    if let Some(cursor) = &filter.after {
        let at = bind(ListParam::Int(cursor.started_at.as_micros()));
        let id = bind(ListParam::Text(cursor.session_id.clone()));
        sql.push_str(&format!(" AND (s.started_at, s.session_id) < ({at}, {id})"));
    }
    if let Some(kind) = filter.kind {
        let p = bind(ListParam::Text(kind.as_str().to_owned()));
        sql.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM entries k WHERE k.sid = s.sid AND k.type = 'step' AND k.kind = {p})"
        ));
    }
    if filter.flagged {
        sql.push_str(&format!(
            " AND s.sid IN (SELECT f.sid FROM entries f WHERE f.org = {} AND f.status = 'flagged')",
            placeholder(1)
        ));
    }
    let p = bind(ListParam::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
    sql.push_str(&format!(
        " ORDER BY s.started_at DESC, s.session_id DESC LIMIT {p}"
    ));
    (sql, params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SessionCursor;
    use cairn_core::Timestamp;
    use cairn_core::kind::StepKind;

    #[test]
    fn every_filter_adds_its_clause_and_its_parameters_in_order() {
        let filter = SessionFilter {
            agent_id: Some("a".into()),
            started_from: Timestamp::from_micros(1),
            started_before: Timestamp::from_micros(2),
            kind: Some(StepKind::ToolCall),
            flagged: true,
            after: Some(SessionCursor {
                started_at: Timestamp::from_micros(3).unwrap_or_default(),
                session_id: "s".into(),
            }),
        };
        let (sql, params) = session_listing_query(7, &filter, 50, |n| format!("${n}"));
        assert_eq!(
            params,
            vec![
                ListParam::Int(7),
                ListParam::Text("a".into()),
                ListParam::Int(1),
                ListParam::Int(2),
                ListParam::Int(3),
                ListParam::Text("s".into()),
                ListParam::Text("tool_call".into()),
                ListParam::Int(50),
            ]
        );
        assert!(sql.contains("s.agent_id = $2"));
        assert!(sql.contains("(s.started_at, s.session_id) < ($5, $6)"));
        assert!(sql.contains("k.kind = $7"));
        assert!(sql.contains("f.org = $1"));
        assert!(sql.ends_with("LIMIT $8"));
        let (plain, params) =
            session_listing_query(7, &SessionFilter::all(), 5, |n| format!("?{n}"));
        assert_eq!(params, vec![ListParam::Int(7), ListParam::Int(5)]);
        assert!(!plain.contains("EXISTS (SELECT 1 FROM entries k"));
    }
}
