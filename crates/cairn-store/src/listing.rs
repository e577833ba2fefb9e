//! The session listing's query, built once for both backends so that they
//! filter and order alike (only the placeholder syntax differs).
//!
//! Every clause is an index range or an indexed lookup: the org and the
//! order come from `sessions_listing (org, started_at, session_id)` (or
//! `sessions_by_agent` for one agent), a page starts strictly after its
//! cursor (a row-value comparison, so a deep page costs what the first
//! does), a kind is checked per candidate session in the derived table
//! `session_kinds (sid, kind)`, and flagged sessions come from the
//! small partial index `entries_flagged`.

use crate::{SessionFilter, StepFilter};

/// A value bound into the listing query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListParam {
    /// An integer (org id, microseconds, limit).
    Int(i64),
    /// A string (agent, kind, session id).
    Text(String),
}

impl ListParam {
    /// As a SQLite parameter.
    pub(crate) fn into_sqlite(self) -> Box<dyn rusqlite::ToSql> {
        match self {
            ListParam::Int(v) => Box::new(v),
            ListParam::Text(v) => Box::new(v),
        }
    }

    /// As a PostgreSQL parameter.
    pub(crate) fn into_pg(self) -> Box<dyn postgres::types::ToSql + Sync> {
        match self {
            ListParam::Int(v) => Box::new(v),
            ListParam::Text(v) => Box::new(v),
        }
    }
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
            " AND EXISTS (SELECT 1 FROM session_kinds k WHERE k.sid = s.sid AND k.kind = {p})"
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

/// Which engine a full-text query is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    /// SQLite FTS5: the org's table (`fulltext::fts5_table`: contentless,
    /// rowid = the entry's id).
    Fts5,
    /// PostgreSQL: `step_search` (id, org, doc tsvector with a GIN index).
    Postgres,
}

/// A full-text search's SQL and parameters: `match_text` is the query in
/// the engine's syntax (`FullTextQuery::to_fts5` / `to_tsquery`). The
/// columns are `seq, score`, best first.
pub(crate) fn step_search_query(
    engine: Engine,
    org: i64,
    match_text: String,
    filter: &StepFilter,
    limit: usize,
    placeholder: fn(usize) -> String,
) -> (String, Vec<ListParam>) {
    let (low, high) = crate::engine::org_range(org);
    let mut params = vec![
        ListParam::Int(org),
        ListParam::Text(match_text),
        ListParam::Int(low),
        ListParam::Int(high),
    ];
    let mut bind = |value: ListParam| {
        params.push(value);
        placeholder(params.len())
    };
    let (org_p, match_p, low_p, high_p) = (
        placeholder(1),
        placeholder(2),
        placeholder(3),
        placeholder(4),
    );
    let fts = crate::fulltext::fts5_table(org);
    if *filter == StepFilter::default() {
        // Without a filter the index answers alone: it holds only steps
        // (the engine writes a document per step), an erasure deletes the
        // step's document (PostgreSQL: in its own transaction; SQLite:
        // before it is acknowledged, and the log's erased steps, few and
        // read through a partial index, are left out besides, for an index
        // file that lags the log), and the org's id range bounds the org.
        // The caller reads each hit back from the log.
        let sql = match engine {
            Engine::Fts5 => format!(
                "SELECT {fts}.rowid - {low_p} AS seq, -bm25({fts}) AS score FROM {fts}
                 WHERE {fts} MATCH {match_p} AND {fts}.rowid >= {low_p} AND {fts}.rowid < {high_p}
                   AND {org_p} IS NOT NULL
                   AND {fts}.rowid NOT IN (
                     SELECT id FROM main.entries WHERE erased = 1 AND id >= {low_p} AND id < {high_p})"
            ),
            Engine::Postgres => format!(
                "SELECT f.id - {low_p} AS seq, ts_rank_cd(f.doc, q.q)::float8 AS score
                 FROM step_search f, CAST({match_p}::text AS tsquery) AS q(q)
                 WHERE f.doc @@ q.q AND f.id >= {low_p} AND f.id < {high_p} AND f.org = {org_p}"
            ),
        };
        let p = bind(ListParam::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
        return (format!("{sql} ORDER BY score DESC, seq LIMIT {p}"), params);
    }
    let mut sql = match engine {
        Engine::Fts5 => format!(
            "SELECT e.seq, -bm25({fts}) AS score FROM {fts} JOIN entries e ON e.id = {fts}.rowid
             WHERE {fts} MATCH {match_p} AND {fts}.rowid >= {low_p} AND {fts}.rowid < {high_p}
               AND e.org = {org_p} AND e.type = 'step' AND e.erased = 0"
        ),
        Engine::Postgres => format!(
            "SELECT e.seq, ts_rank_cd(f.doc, q.q)::float8 AS score
             FROM step_search f JOIN entries e ON e.id = f.id, CAST({match_p}::text AS tsquery) AS q(q)
             WHERE f.doc @@ q.q AND f.id >= {low_p} AND f.id < {high_p} AND f.org = {org_p}
               AND e.org = {org_p} AND e.type = 'step' AND NOT e.erased"
        ),
    };
    if let Some(agent) = &filter.agent_id {
        let p = bind(ListParam::Text(agent.clone()));
        sql.push_str(&format!(" AND e.agent_id = {p}"));
    }
    if let Some(session) = &filter.session_id {
        let p = bind(ListParam::Text(session.clone()));
        sql.push_str(&format!(
            " AND e.sid = (SELECT s.sid FROM sessions s WHERE s.org = {org_p} AND s.session_id = {p})"
        ));
    }
    if let Some(kind) = filter.kind {
        let p = bind(ListParam::Text(kind.as_str().to_owned()));
        sql.push_str(&format!(" AND e.kind = {p}"));
    }
    if let Some(status) = filter.status {
        let p = bind(ListParam::Text(status.as_str().to_owned()));
        sql.push_str(&format!(" AND e.status = {p}"));
    }
    if let Some(since) = filter.since {
        let p = bind(ListParam::Int(since.as_micros()));
        sql.push_str(&format!(" AND e.created_at >= {p}"));
    }
    if let Some(until) = filter.until {
        let p = bind(ListParam::Int(until.as_micros()));
        sql.push_str(&format!(" AND e.created_at < {p}"));
    }
    let p = bind(ListParam::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
    sql.push_str(&format!(" ORDER BY score DESC, e.seq LIMIT {p}"));
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
