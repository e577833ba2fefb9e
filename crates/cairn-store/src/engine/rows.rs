//! The column conventions both schemas share: row ids, the step columns
//! and their parsing, JSON columns.

use super::*;

/// The agent keys recorded by an org's key-registration records, given as
/// `(seq, view)` in log order.
pub(crate) fn agent_keys_from_views(
    views: impl IntoIterator<Item = (u64, String)>,
) -> Result<Vec<(u64, KeyRegistration)>, StoreError> {
    let mut out = Vec::new();
    for (seq, view) in views {
        let view = stored_json(&view)
            .map_err(|e| StoreError::Corrupt(format!("key registration {seq}: {e}")))?;
        match OpRecord::from_view("key-registration", &view) {
            Ok(OpRecord::KeyRegistration(reg)) => out.push((seq, reg)),
            _ => {
                return Err(StoreError::Corrupt(format!(
                    "key registration {seq} does not parse"
                )));
            }
        }
    }
    Ok(out)
}

/// Folds one key record of an org's log (its `seq`, entry type and view,
/// read in log order) into the sequencer's keys of the org: a
/// registration adds its key, a revocation marks its key revoked.
pub(crate) fn fold_key_record(
    keys: &mut HashMap<String, AgentKey>,
    seq: u64,
    entry_type: &str,
    view: &str,
) -> Result<(), StoreError> {
    match op_from_view(seq, entry_type, view)? {
        OpRecord::KeyRegistration(reg) => {
            keys.insert(
                reg.key_id,
                AgentKey {
                    agent_id: reg.agent_id,
                    key: reg.public_key,
                    seq,
                    revoked: None,
                },
            );
        }
        OpRecord::KeyRevocation(rev) => {
            if let Some(key) = keys.get_mut(&rev.key_id) {
                key.revoked = Some(seq);
            }
        }
        _ => {}
    }
    Ok(())
}

/// The rowid of an entry: `(org << 40) | seq`, so that each org's log is
/// one contiguous, append-only rowid range and needs no second index.
/// (2^40 entries per org, 2^23 orgs.)
pub(crate) fn row_id(org: i64, seq: u64) -> i64 {
    (org << 40) | (seq.min((1 << 40) - 1) as i64)
}

/// The rowid below the first entry of org `org` after position `after`
/// (its whole log when `None`): pages of entries start past it.
pub(crate) fn row_id_after(org: i64, after: Option<u64>) -> i64 {
    after.map_or(row_id(org, 0) - 1, |seq| row_id(org, seq))
}

/// The log position a rowid of [`row_id`] stands for.
pub(crate) fn seq_of_row(id: i64) -> u64 {
    (id & ((1 << 40) - 1)) as u64
}

/// Rowid bounds of an org's log, half-open.
pub(crate) fn org_range(org: i64) -> (i64, i64) {
    (org << 40, (org + 1) << 40)
}

/// The 33 columns a step is read from into a [`RawStep`] (`e` entries,
/// `o` orgs, `s` sessions).
pub(crate) const STEP_COLUMNS: &str = "e.seq, e.trace_id, e.agent_id, e.kind, e.kind_label, e.content, e.input_data,
    e.output_data, e.confidence, e.duration_ms, e.token_count, e.model, e.metadata, e.created_at, e.turn_id,
    e.turn_step, e.task_id, e.links, e.status, e.seed, e.digest, e.prev_hash, e.record_hash, e.sig_key_id,
    e.signature, e.has_embedding, e.erased, e.hidden, e.step_index, o.name, s.session_id, e.salts, e.logged_at";

/// The log's entries with every column a stored entry is read from
/// (`STEP_COLUMNS`, then type, view and leaf hash, then the entry's org
/// and its session's row: [`SessionRow`], then the entry's `sid` and
/// `prev_seq`: [`CHAIN_LINK_COLUMN`]), then `filter` (the WHERE clause and
/// order, in the backend's parameter style): one text for every backend's
/// log reads.
pub(crate) fn log_entries_query(filter: &str) -> String {
    log_entries_query_with("", filter)
}

/// [`log_entries_query`] with `extra` columns after its own (`", ..."`),
/// which readers of its rows by position never read.
pub(crate) fn log_entries_query_with(extra: &str, filter: &str) -> String {
    format!(
        "SELECT {STEP_COLUMNS}, e.type, e.view, e.leaf_hash, e.org, s.org, s.agent_id, s.profile,
           s.started_at, s.start_seq, s.genesis, s.max_clock_skew_s, e.sid, e.prev_seq{extra}
         FROM entries e
         JOIN orgs o ON o.org = e.org LEFT JOIN sessions s ON s.sid = e.sid {filter}"
    )
}

/// Where a row of [`log_entries_query`] holds its `sid` (then `prev_seq`
/// after it), counted from [`STEP_COLUMN_COUNT`].
pub(crate) const CHAIN_LINK_COLUMN: usize = 11;

/// The row of the `sessions` table that a session-start entry's `sid`
/// names, read beside the entry (the last columns of
/// [`log_entries_query`]; `None` where the row is missing).
pub(crate) struct SessionRow<'r> {
    /// The entry's own org.
    pub entry_org: i64,
    pub org: Option<i64>,
    pub session_id: Option<&'r str>,
    pub agent_id: Option<&'r str>,
    pub profile: Option<&'r str>,
    pub started_at: Option<i64>,
    pub start_seq: Option<i64>,
    pub genesis: Option<&'r [u8]>,
    pub max_clock_skew_s: Option<i64>,
}

/// How many rows of org `$org`'s `sessions` table no session-start entry
/// of its log names (at the row's `start_seq`, with the row's `sid`), with
/// `org` the backend's placeholder for the org's number. Verification
/// checks each session-start record against its row; this finds the rows
/// no record checks (a fake session a listing would show).
pub(crate) fn orphan_sessions_query(org: &str) -> String {
    format!(
        "SELECT count(*) FROM sessions s WHERE s.org = {org} AND NOT EXISTS (
           SELECT 1 FROM entries e WHERE e.id = ((s.org << 40) | s.start_seq)
             AND e.type = 'session-start' AND e.sid = s.sid)"
    )
}

/// Org numbers whose log holds entries (or tree nodes, checkpoints) but
/// which the `orgs` table does not name (none in a store nobody edited): an org's row deleted hides
/// its whole log from `orgs()`, and so from listings and `verify
/// --all-orgs`. The first entry of the table and the first entry after
/// each named org's range are looked up (a seek each): any unnamed org
/// with entries makes at least one of them an entry of an unnamed org (the
/// lowest such org after a named one, or below every named one). Org
/// numbers whose range does not fit a row id (below 0, from 2^23 - 1)
/// hold no entries and are not shifted (PostgreSQL refuses the overflow).
/// Tree nodes and checkpoints carry their org number: each table is read
/// (a scan of its key) for numbers no org row names, which would refuse
/// the first appends or checkpoints of the org that gets that number.
pub(crate) const UNLISTED_LOG_ORGS: &str = "SELECT DISTINCT n FROM (
       SELECT (SELECT min(id) FROM entries) >> 40 AS n
       UNION ALL
       SELECT (SELECT e.id FROM entries e WHERE e.id >= ((o.org + 1) << 40) ORDER BY e.id LIMIT 1) >> 40
       FROM orgs o WHERE o.org >= 0 AND o.org < 8388607
       UNION ALL
       SELECT DISTINCT org FROM nodes
       UNION ALL
       SELECT DISTINCT org FROM checkpoints
     ) AS firsts
     WHERE n IS NOT NULL AND NOT EXISTS (SELECT 1 FROM orgs o WHERE o.org = n)
     ORDER BY n";

/// A page of org `{org}`'s `session_heads` rows after session number
/// `{after}` (at most `{limit}`), with the backend's placeholders. Driven
/// by the heads' key from `{after}` (`+s.org` keeps SQLite off the
/// sessions' org index, which would read every session of the org for
/// each page and sort them): linear in the rows over all pages.
pub(crate) fn session_heads_page_query(org: &str, after: &str, limit: &str) -> String {
    format!(
        "SELECT h.sid, s.session_id, h.first_seq, h.last_seq, h.last_index
         FROM session_heads h JOIN sessions s ON s.sid = h.sid
         WHERE +s.org = {org} AND h.sid > {after} AND s.sid > {after}
         ORDER BY h.sid LIMIT {limit}"
    )
}

/// A page of org `{org}`'s `session_kinds` rows after (`{sid}`,
/// `{kind}`) (at most `{limit}`), with the backend's placeholders; by the
/// kind rows' key, as [`session_heads_page_query`].
pub(crate) fn session_kinds_page_query(org: &str, sid: &str, kind: &str, limit: &str) -> String {
    format!(
        "SELECT k.sid, s.session_id, k.kind
         FROM session_kinds k JOIN sessions s ON s.sid = k.sid
         WHERE +s.org = {org} AND (k.sid, k.kind) > ({sid}, {kind}) AND s.sid >= {sid}
         ORDER BY k.sid, k.kind LIMIT {limit}"
    )
}

/// The state of a store's `session_kinds` table (a store of an earlier
/// version has none, and gets it filled by the first sequencer of this
/// one, which then drops the index over `entries (sid, kind)` it
/// replaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KindRows {
    /// No table.
    Absent,
    /// The table exists but is not filled yet (the old index is there).
    Filling,
    /// Filled: one row per kind of every session.
    Built,
}

impl KindRows {
    /// The state from whether the table and the old index exist.
    pub(crate) fn of(table: bool, old_index: bool) -> KindRows {
        match (table, old_index) {
            (false, _) => KindRows::Absent,
            (true, true) => KindRows::Filling,
            (true, false) => KindRows::Built,
        }
    }

    /// The query that counts the derived rows planted for a session number
    /// no session has yet (kind rows too once the table exists, filled or
    /// not).
    pub(crate) fn unattached_query(self) -> &'static str {
        match self {
            KindRows::Absent => UNATTACHED_HEAD_ROWS,
            KindRows::Filling | KindRows::Built => UNATTACHED_SESSION_ROWS,
        }
    }
}

/// How many `session_heads` and `session_kinds` rows name a session
/// number past every session's: rows planted for a session not created
/// yet, which the next session would inherit (a kind it never had, a
/// head that stops its own from being written).
/// `session_kinds` is left out of a store of an earlier version that has
/// none yet (`UNATTACHED_HEAD_ROWS`).
const UNATTACHED_SESSION_ROWS: &str = "SELECT
    (SELECT count(*) FROM session_heads WHERE sid > (SELECT coalesce(max(sid), -1) FROM sessions))
  + (SELECT count(*) FROM session_kinds WHERE sid > (SELECT coalesce(max(sid), -1) FROM sessions))";

/// [`UNATTACHED_SESSION_ROWS`] of `session_heads` alone.
const UNATTACHED_HEAD_ROWS: &str = "SELECT
    (SELECT count(*) FROM session_heads WHERE sid > (SELECT coalesce(max(sid), -1) FROM sessions))";

/// A session-start record read with its session's row: the row must say
/// exactly what the record says. The `sessions` table is derived, but
/// listings and filters read it (who ran a session, when it started, in
/// which org), so a row edited to name another agent would move the
/// session out of that agent's audit while every hash still held. A row
/// that disagrees makes the record unreadable (verification then fails at
/// this record, `malformed-record`).
pub(crate) fn check_session_row(
    seq: u64,
    header: &SessionHeader,
    row: &SessionRow<'_>,
) -> Result<(), StoreError> {
    let skew = i64::try_from(header.max_clock_skew_s).unwrap_or(i64::MAX);
    let genesis = genesis_hash(header);
    let disagreement = if row.org.is_none() {
        Some("has no row in the sessions table".to_owned())
    } else if row.org != Some(row.entry_org) {
        Some("has a sessions row in another org".to_owned())
    } else if row.session_id != Some(header.session_id.as_str()) {
        Some(format!(
            "names session {}, its sessions row {:?}",
            header.session_id,
            row.session_id.unwrap_or_default()
        ))
    } else if row.agent_id != Some(header.agent_id.as_str()) {
        Some(format!(
            "names agent {}, its sessions row {:?}",
            header.agent_id,
            row.agent_id.unwrap_or_default()
        ))
    } else if row.profile != Some(header.profile.as_str()) {
        Some(format!(
            "names profile {}, its sessions row {:?}",
            header.profile.as_str(),
            row.profile.unwrap_or_default()
        ))
    } else if row.started_at != Some(header.started_at.as_micros()) {
        Some("starts at another time than its sessions row says".to_owned())
    } else if row.start_seq != i64::try_from(seq).ok() {
        Some("is not where its sessions row says the session starts".to_owned())
    } else if row.genesis != Some(&genesis.0[..]) {
        Some("has another genesis hash than its sessions row".to_owned())
    } else if row.max_clock_skew_s != Some(skew) {
        Some("allows another clock skew than its sessions row".to_owned())
    } else {
        None
    };
    match disagreement {
        None => Ok(()),
        Some(what) => Err(StoreError::Corrupt(format!(
            "record {seq}: the session-start record {what}"
        ))),
    }
}

/// The columns an operational record's row is found by (its session's
/// row through `sid`, its agent, step index and id), read beside the
/// record: each must say what the record says. Readers look records up by
/// them (a session's seal and oversight records by `sid`, an agent's key
/// records by `agent_id`, an audit event by `trace_id`), so an edited
/// column would hide a seal, a revocation or an erasure from a session's
/// reads and exports, or serve one record for another, while every hash
/// still held. A row that disagrees makes the record unreadable
/// (`malformed-record`).
pub(crate) struct OpColumns<'r> {
    /// The entry's own org.
    pub entry_org: i64,
    /// The org and session id of the `sessions` row `sid` names (`None`
    /// when `sid` is NULL or names no row).
    pub session_org: Option<i64>,
    pub session_id: Option<&'r str>,
    pub agent_id: Option<&'r str>,
    pub step_index: Option<i64>,
    pub trace_id: Option<&'r str>,
}

/// Checks an operational record against its row's lookup columns
/// ([`OpColumns`]).
pub(crate) fn check_op_columns(
    seq: u64,
    record: &OpRecord,
    row: &OpColumns<'_>,
) -> Result<(), StoreError> {
    let (step_index, agent_id) = op_target(record);
    let disagreement = match record.session_id() {
        Some(name) if row.session_org != Some(row.entry_org) || row.session_id != Some(name) => {
            Some(format!(
                "names session {name}, its row's session {:?}",
                row.session_id.unwrap_or_default()
            ))
        }
        None if row.session_org.is_some() => Some(format!(
            "names no session, its row session {:?}",
            row.session_id.unwrap_or_default()
        )),
        _ if row.agent_id != agent_id => Some(format!(
            "names agent {:?}, its row {:?}",
            agent_id.unwrap_or_default(),
            row.agent_id.unwrap_or_default()
        )),
        _ if row.step_index != step_index.and_then(|i| i64::try_from(i).ok()) => {
            Some("names another step index than its row".to_owned())
        }
        _ if row.trace_id != op_record_id(record) => Some(format!(
            "has id {:?}, its row {:?}",
            op_record_id(record).unwrap_or_default(),
            row.trace_id.unwrap_or_default()
        )),
        _ => None,
    };
    match disagreement {
        None => Ok(()),
        Some(what) => Err(StoreError::Corrupt(format!(
            "record {seq}: the {} record {what}",
            record.entry_type()
        ))),
    }
}

/// A step's row must join the `sessions` row of its own org: the session
/// id the digest commits is read through that join, so a `sid` pointing at
/// a same-named session of another org would keep every hash while moving
/// the step out of its session's reads.
pub(crate) fn check_step_session(
    seq: u64,
    entry_org: i64,
    session_org: Option<i64>,
) -> Result<(), StoreError> {
    if session_org == Some(entry_org) {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!(
            "record {seq}: the step's sessions row is missing or in another org"
        )))
    }
}

/// How many columns [`STEP_COLUMNS`] selects.
pub(crate) const STEP_COLUMN_COUNT: usize = 33;

/// The name and key that sign an org's log: the server's own, or for a
/// mirror the origin server's recorded `(name, vkey)`.
pub(crate) fn signer_of(
    key: &ServerKey,
    origin: Option<(String, String)>,
) -> Result<(String, cairn_core::note::NoteVerifier), StoreError> {
    match origin {
        None => Ok((key.signer.name().to_owned(), key.verifier.clone())),
        Some((name, vkey)) => {
            let verifier = cairn_core::note::NoteVerifier::parse(&vkey)
                .map_err(|e| StoreError::Corrupt(format!("origin key: {e}")))?;
            Ok((name, verifier))
        }
    }
}

/// A stored 32-byte hash.
pub(crate) fn blob_hash(bytes: Vec<u8>) -> Result<Hash, StoreError> {
    hash_of(&bytes)
}

/// A stored hash from its column's bytes, read in place.
pub(crate) fn hash_of(bytes: &[u8]) -> Result<Hash, StoreError> {
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt("a stored hash is not 32 bytes".into()))?;
    Ok(Hash(arr))
}

/// A JSON column's text: serde_json's compact form, written straight into
/// the string (`Value`'s `Display`, the same text, goes through `fmt` a
/// fragment at a time: 1.7% of all of `cairn log --stdin`'s samples, on
/// the sequencer).
pub(crate) fn json_text(value: &Option<serde_json::Value>) -> Option<String> {
    value.as_ref().map(compact_json)
}

/// `value`'s compact JSON text (`Value`'s `Display` text, written without
/// `fmt`): every JSON column's text.
pub(crate) fn compact_json(value: &serde_json::Value) -> String {
    // Serializing a `Value` cannot fail (its keys are strings, its numbers
    // finite); `Display` is the same text should it ever.
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// The links column's text (None when there are no links).
pub(crate) fn links_text(links: &Links) -> Option<String> {
    if links.is_empty() {
        return None;
    }
    let map: serde_json::Map<String, serde_json::Value> = links
        .entries()
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_owned(), serde_json::Value::String(v.to_owned()))))
        .collect();
    Some(compact_json(&serde_json::Value::Object(map)))
}

/// A JSON column or record view as stored, read strictly
/// ([`cairn_core::json::from_str`]): a repeated member name or an integer
/// literal beyond ±(2^53 − 1) is corruption. Cairn never writes either,
/// and a lenient reading would let an edited row say two things: serde_json
/// keeps a repeated member's last value (which the digest would then
/// commit), SQLite's `json_extract` its first (which analyst SQL shows).
pub(crate) fn stored_json(text: &str) -> Result<serde_json::Value, String> {
    cairn_core::json::from_str(text)
}

/// A parsed operational record from its stored type and view.
pub(crate) fn op_from_view(seq: u64, entry_type: &str, view: &str) -> Result<OpRecord, StoreError> {
    let view = stored_json(view).map_err(|e| StoreError::Corrupt(format!("record {seq}: {e}")))?;
    OpRecord::from_view(entry_type, &view)
        .map_err(|e| StoreError::Corrupt(format!("record {seq}: {e}")))
}

/// What an operational record was looked up by, through its row's
/// columns (`sid`, `agent_id`, `trace_id`) rather than its hashed view.
#[derive(Clone, Copy)]
pub(crate) enum LookedUpBy<'a> {
    /// A session's records, found by the session's `sid`.
    Session(&'a str),
    /// Key records, found by `agent_id` when an agent is asked for.
    Agent(Option<&'a str>),
    /// A record found by its id (`trace_id`).
    Id(&'a str),
}

/// A record found by a lookup column, parsed and required to say what it
/// was looked up by: a row whose column was edited to bring another
/// record into a session's, an agent's or an id's answer fails the read
/// (`Corrupt`) instead of being served. (A record whose column was edited
/// to take it out of an answer is not found by the lookup: verification
/// of the org catches that, [`check_op_columns`].)
pub(crate) fn op_looked_up(
    seq: u64,
    entry_type: &str,
    view: &str,
    by: LookedUpBy<'_>,
) -> Result<OpRecord, StoreError> {
    let record = op_from_view(seq, entry_type, view)?;
    let matches = match by {
        LookedUpBy::Session(session) => record.session_id() == Some(session),
        LookedUpBy::Agent(None) => true,
        LookedUpBy::Agent(Some(agent)) => op_target(&record).1 == Some(agent),
        LookedUpBy::Id(id) => op_record_id(&record) == Some(id),
    };
    if matches {
        Ok(record)
    } else {
        Err(StoreError::Corrupt(format!(
            "record {seq}: its row's lookup columns name another session, agent or id than the record (an edited row; cairn verify names it)"
        )))
    }
}

/// The log entry of a row without a view: an erased signed trace, whose
/// recorded hash is all it keeps (any other type is corrupt; the verifier
/// requires a trace-erasure record naming it).
pub(crate) fn withheld_entry(
    seq: u64,
    entry_type: &str,
    logged_at: Timestamp,
    hash: Hash,
) -> Result<(LogEntry, Option<Hash>), StoreError> {
    if entry_type != "signed-trace" {
        return Err(StoreError::Corrupt(format!("record {seq} has no view")));
    }
    let entry = LogEntry {
        seq,
        logged_at,
        record: LogRecord::ErasedTrace { hash },
    };
    Ok((entry, None))
}

/// [`op_looked_up`] for a row that may be an erased signed trace, whose
/// view is withheld (`None`).
pub(crate) fn withheld_or_looked_up(
    seq: u64,
    entry_type: &str,
    view: Option<&str>,
    by: LookedUpBy<'_>,
) -> Result<Option<OpRecord>, StoreError> {
    match view {
        Some(view) => op_looked_up(seq, entry_type, view, by).map(Some),
        None if entry_type == "signed-trace" => Ok(None),
        None => Err(StoreError::Corrupt(format!("record {seq} has no view"))),
    }
}

/// How a log row's step is read: for whoever reads the record, or for a
/// verifier of the log ([`RawStep::parse_for_verification`]: with its
/// digest recomputed, possibly without its payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepReading {
    Record,
    Verification,
}

/// A step's columns as read from either backend, before parsing: every
/// value borrowed from the row.
#[derive(Clone, Copy)]
pub(crate) struct RawStep<'r> {
    pub seq: i64,
    pub logged_at: i64,
    pub org_id: &'r str,
    pub session_id: &'r str,
    pub step_index: i64,
    pub trace_id: &'r str,
    pub agent_id: &'r str,
    pub kind: &'r str,
    pub kind_label: &'r str,
    pub content: Option<&'r str>,
    pub input: Option<&'r str>,
    pub output: Option<&'r str>,
    pub confidence: Option<f64>,
    pub duration_ms: Option<i64>,
    pub token_count: Option<i64>,
    pub model: Option<&'r str>,
    pub metadata: Option<&'r str>,
    pub created_at: i64,
    pub turn_id: Option<&'r str>,
    pub turn_step: Option<i64>,
    pub task_id: Option<&'r str>,
    pub links: Option<&'r str>,
    pub status: &'r str,
    pub seed: Option<&'r [u8]>,
    pub salts: Option<&'r [u8]>,
    pub digest: &'r [u8],
    pub prev_hash: &'r [u8],
    pub hash: &'r [u8],
    pub signer_key_id: Option<&'r str>,
    pub signature: Option<&'r [u8]>,
    pub has_embedding: bool,
    pub erased: bool,
    pub hidden: Option<&'r str>,
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("stored step: {what}"))
}

/// An integer column of a `u64` field, as stored (two's complement).
/// A stored unsigned number (written from a `u64`) as the record holds
/// it.
pub(crate) fn to_u64(v: Option<i64>) -> Option<u64> {
    v.map(|v| v as u64)
}

/// A JSON column as a verifier's digest needs it: its text when that is
/// already its value's canonical JSON (committed as it is), else its
/// parsed value.
enum JsonColumn<'t> {
    Null,
    Canonical(cairn_core::jcs::CanonicalJson<'t>),
    Parsed(serde_json::Value),
}

impl<'t> JsonColumn<'t> {
    /// `None` if the text does not parse.
    fn read(text: Option<&'t str>) -> Option<JsonColumn<'t>> {
        let Some(text) = text else {
            return Some(JsonColumn::Null);
        };
        Some(match cairn_core::jcs::CanonicalJson::new(text) {
            Some(canonical) => JsonColumn::Canonical(canonical),
            None => JsonColumn::Parsed(stored_json(text).ok()?),
        })
    }

    fn value(&self) -> Option<cairn_core::commit::JsonValue<'_>> {
        use cairn_core::commit::JsonValue;
        match self {
            JsonColumn::Null => None,
            JsonColumn::Canonical(text) => Some(JsonValue::Canonical(*text)),
            JsonColumn::Parsed(value) => Some(JsonValue::Parsed(value)),
        }
    }
}

impl<'r> RawStep<'r> {
    /// Parses the columns into a record; a column that does not parse is
    /// corruption (verification then says which record).
    pub fn parse(self) -> Result<StoredStep, StoreError> {
        let json = |text: Option<&str>| -> Result<Option<serde_json::Value>, StoreError> {
            text.map(|t| {
                stored_json(t).map_err(|e| corrupt(&format!("a JSON column does not parse: {e}")))
            })
            .transpose()
        };
        let kind = self.kind()?;
        let links = match json(self.links)? {
            None => Links::default(),
            Some(v) => Links::from_json(&v).map_err(|e| corrupt(&e))?,
        };
        let step = Step {
            trace_id: self.trace_id.to_owned(),
            org_id: self.org_id.to_owned(),
            agent_id: self.agent_id.to_owned(),
            session_id: self.session_id.to_owned(),
            step_index: self.step_index as u64,
            kind,
            kind_label: self.kind_label.to_owned(),
            content: self.content.map(str::to_owned),
            input: json(self.input)?,
            output: json(self.output)?,
            confidence: self.confidence,
            duration_ms: to_u64(self.duration_ms),
            token_count: to_u64(self.token_count),
            model: self.model.map(str::to_owned),
            metadata: json(self.metadata)?,
            created_at: Timestamp::from_micros(self.created_at)
                .ok_or_else(|| corrupt("timestamp out of range"))?,
            turn_id: self.turn_id.map(str::to_owned),
            turn_step: to_u64(self.turn_step),
            task_id: self.task_id.map(str::to_owned),
            links,
            status: Status::parse(self.status).ok_or_else(|| corrupt("unknown status"))?,
            signer_key_id: self.signer_key_id.map(str::to_owned),
        };
        if self.erased && self.hidden.is_none() {
            // An erasure hides fields; a step marked erased that shows
            // every field would be left out of search and refused a real
            // erasure while its content stayed in place.
            return Err(corrupt("marked erased but hides no field"));
        }
        let mut openings = self.revealed_openings()?;
        if let Some(hidden) = json(self.hidden)? {
            let map = hidden
                .as_object()
                .ok_or_else(|| corrupt("hidden is not an object"))?;
            for (name, value) in map {
                let field = Field::from_name(name)
                    .ok_or_else(|| corrupt("hidden names an unknown field"))?;
                let hash = value
                    .as_str()
                    .and_then(|s| Hash::from_hex(s).ok())
                    .ok_or_else(|| corrupt("hidden commitment is not a hash"))?;
                openings.0[field.position()] = Opening::Hidden(hash);
            }
        }
        self.record(step, openings)
    }

    /// The kind column, which must be the kind's own name: the digest
    /// commits the parsed kind, but readers filter on the column's text
    /// (`kind = 'tool_call'` in searches and analyst SQL), so another
    /// spelling the parser accepts (`[Tool-Call]`) would hide the step from
    /// them while every hash held.
    fn kind(&self) -> Result<cairn_core::kind::StepKind, StoreError> {
        cairn_core::kind::StepKind::parse(self.kind)
            .filter(|k| k.as_str() == self.kind)
            .ok_or_else(|| corrupt("the kind column is not a kind's name"))
    }

    /// Every field's salt: from the seed, or for a step imported from a
    /// bundle (no seed) the salts themselves.
    fn revealed_openings(&self) -> Result<Openings, StoreError> {
        match self.seed {
            Some(seed) => {
                let seed: [u8; 32] = seed
                    .try_into()
                    .map_err(|_| corrupt("seed is not 32 bytes"))?;
                Ok(Openings::from_seed(&seed))
            }
            None => {
                let salts = self
                    .salts
                    .ok_or_else(|| corrupt("neither seed nor salts"))?;
                if salts.len() != 16 * cairn_core::commit::FIELD_COUNT {
                    return Err(corrupt("salts are not 16 bytes per field"));
                }
                Ok(Openings(std::array::from_fn(|i| {
                    let mut salt = [0u8; 16];
                    salt.copy_from_slice(&salts[16 * i..16 * i + 16]);
                    Opening::Revealed(salt)
                })))
            }
        }
    }

    /// The stored record of `step` with `openings` and the row's hashes,
    /// signature, flags and log time.
    fn record(self, step: Step, openings: Openings) -> Result<StoredStep, StoreError> {
        // `sig_key_id` is the declared signer (a committed field); the
        // signature bytes are beside it.
        let signature = match (self.signer_key_id, self.signature) {
            (Some(key_id), Some(bytes)) => Some(AgentSignature {
                key_id: key_id.to_owned(),
                signature: bytes
                    .try_into()
                    .map_err(|_| corrupt("signature is not 64 bytes"))?,
            }),
            _ => None,
        };
        Ok(StoredStep {
            seq: self.seq as u64,
            logged_at: Timestamp::from_micros(self.logged_at)
                .ok_or_else(|| corrupt("logged_at out of range"))?,
            record: StepRecord {
                step,
                openings,
                digest: hash_of(self.digest)?,
                prev_hash: hash_of(self.prev_hash)?,
                hash: hash_of(self.hash)?,
                signature,
                has_embedding: self.has_embedding,
                erased: self.erased,
            },
        })
    }

    /// The step read as `how` says, with its recomputed digest for a
    /// verifier.
    pub fn read(self, how: StepReading) -> Result<(StoredStep, Option<Hash>), StoreError> {
        match how {
            StepReading::Record => Ok((self.parse()?, None)),
            StepReading::Verification => {
                let (stored, digest) = self.parse_for_verification()?;
                Ok((stored, Some(digest)))
            }
        }
    }

    /// For a verifier of the log (`LedgerStore::read_log_for_verification`):
    /// the step with its digest recomputed from its fields. What
    /// [`RawStep::parse`] gives and its record's `recompute_digest`, except
    /// that a step whose recomputed digest is the recorded one, with no
    /// field hidden, comes without its payload: `kind_label`, `content`,
    /// `input_data`, `output_data`, `confidence`, `duration_ms`,
    /// `token_count`, `model`, `metadata`, the turn, the task and the links
    /// are blank in its record (their text was committed from where the
    /// row holds it, never copied into a record). The in-order checks of a
    /// log verifier given the digest read none of them; nothing else may be
    /// given such a record.
    /// Any other step (one with hidden fields, a column that does not
    /// parse, a digest that does not recompute) is parsed in full, so a
    /// failure is worded as it always is.
    pub fn parse_for_verification(self) -> Result<(StoredStep, Hash), StoreError> {
        if let Some(checked) = self.checked_without_payload() {
            return Ok(checked);
        }
        let stored = self.parse()?;
        let digest = stored.record.recompute_digest();
        Ok((stored, digest))
    }

    /// [`RawStep::parse_for_verification`]'s quick path: `None` unless the
    /// step has no hidden field, every column parses, and its digest
    /// recomputes to the recorded one. The digest is computed from exactly
    /// the values [`RawStep::parse`] would give, only borrowed instead of
    /// copied: a JSON column's text is committed as it is only if it is
    /// the canonical JSON of what it parses to (`CanonicalJson`, which
    /// looks at the text alone), else it is parsed as `parse` parses it.
    fn checked_without_payload(self) -> Option<(StoredStep, Hash)> {
        use cairn_core::commit::{StepFields, step_digest_of};
        if self.hidden.is_some() || self.erased {
            return None;
        }
        let kind = self.kind().ok()?;
        let status = Status::parse(self.status)?;
        let created_at = Timestamp::from_micros(self.created_at)?;
        let openings = self.revealed_openings().ok()?;
        let (input, output) = (
            JsonColumn::read(self.input)?,
            JsonColumn::read(self.output)?,
        );
        let metadata = JsonColumn::read(self.metadata)?;
        let links = match self.links {
            None => Links::default(),
            Some(text) => Links::from_json(&stored_json(text).ok()?).ok()?,
        };
        let fields = StepFields {
            trace_id: self.trace_id,
            org_id: self.org_id,
            agent_id: self.agent_id,
            session_id: self.session_id,
            step_index: self.step_index as u64,
            kind,
            kind_label: self.kind_label,
            content: self.content,
            input: input.value(),
            output: output.value(),
            confidence: self.confidence,
            duration_ms: to_u64(self.duration_ms),
            token_count: to_u64(self.token_count),
            model: self.model,
            metadata: metadata.value(),
            created_at,
            turn_id: self.turn_id,
            turn_step: to_u64(self.turn_step),
            task_id: self.task_id,
            links: &links,
            status,
            signer_key_id: self.signer_key_id,
        };
        let digest = step_digest_of(&fields, &openings);
        if hash_of(self.digest).ok()? != digest {
            return None;
        }
        let step = Step {
            trace_id: self.trace_id.to_owned(),
            org_id: self.org_id.to_owned(),
            agent_id: self.agent_id.to_owned(),
            session_id: self.session_id.to_owned(),
            step_index: self.step_index as u64,
            kind,
            kind_label: String::new(),
            content: None,
            input: None,
            output: None,
            confidence: None,
            duration_ms: None,
            token_count: None,
            model: None,
            metadata: None,
            created_at,
            turn_id: None,
            turn_step: None,
            task_id: None,
            links: Links::default(),
            status,
            signer_key_id: self.signer_key_id.map(str::to_owned),
        };
        let stored = self.record(step, openings).ok()?;
        Some((stored, digest))
    }
}

#[cfg(test)]
mod tests;
