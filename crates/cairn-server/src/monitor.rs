//! `cairn monitor`: follows an org log through its C2SP tlog-tiles read API
//! (FORMAT.md 7.9) with plain GETs, and reports the first problem.
//!
//! Each poll reads the checkpoint and checks its signature; a checkpoint
//! smaller than the last one seen is a *rollback*, one of the same size
//! with another root a *fork*. A larger one is mirrored: the entry bundles,
//! level-0 hash tiles and record tiles of the new entries are fetched, each
//! record's leaf must be the entry bundle's and the hash tile's, and every
//! record is re-verified in order ([`LogVerifier`]) up to the checkpoint,
//! whose root must be the one the mirrored leaves make: a history rewritten
//! below the last checkpoint seen cannot lead to it.

use axum::body::Bytes;
use cairn_core::Hash;
use cairn_core::bundle::decode_entry;
use cairn_core::checkpoint::{Checkpoint, VerifiedCheckpoint, verify_checkpoint};
use cairn_core::note::{Note, NoteVerifier};
use cairn_core::tiles::{TILE_WIDTH, Tile, TileKind, decode_entry_bundle};
use cairn_core::verify::{Failure, LogVerifier, Reason};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a monitor is told.
#[derive(Debug, Clone)]
pub struct MonitorConfig {
    /// The log's tlog-tiles prefix (`http://host:port/v1/tlog`).
    pub prefix: String,
    /// An API key of the org (auditor or admin: record tiles are the whole
    /// content).
    pub api_key: String,
    /// The log's checkpoint keys (more than one across a key rotation).
    pub log_keys: Vec<NoteVerifier>,
    /// The largest response read, in bytes.
    pub max_response_bytes: usize,
    /// A checkpoint seen before (by an earlier run): the log must not roll
    /// back or fork from it.
    pub last_seen: Option<String>,
    /// The erasure deadlines an earlier run left pending
    /// ([`Monitor::pending_erasures`]): each still binds this run, so that
    /// runs of one poll each (`--once --state`) enforce them as one
    /// long-running monitor does.
    pub pending_erasures: Vec<PendingErasure>,
}

/// An entry read as erased (a step's payload) or withheld (a signed
/// trace) whose erasure record the mirror has not reached yet (FORMAT.md
/// 7.9, rule 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingErasure {
    /// The entry's seq.
    pub seq: u64,
    /// The log size by which its erasure record must have been logged.
    pub deadline: u64,
    /// Whether the deadline was already capped by a checkpoint verified
    /// after the entry was read.
    pub capped: bool,
}

/// A problem a poll found: the monitor's alarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The checkpoint is smaller than one seen before.
    Rollback {
        /// The size seen before.
        seen: u64,
        /// The size now.
        now: u64,
    },
    /// Two checkpoints of the same size with different roots.
    Fork {
        /// The size.
        size: u64,
        /// The root seen before.
        seen: Hash,
        /// The root now.
        now: Hash,
    },
    /// A record, a tile or the tree failed verification.
    Verification(Box<Failure>),
    /// The log's answers do not follow the API (a tile it must hold is
    /// missing, a checkpoint does not verify, a body is malformed).
    Unreadable(String),
    /// The log could not be reached or was busy (connection refused, a
    /// timeout, a 5xx or 429): not a finding about the log; poll again.
    Unavailable(String),
    /// The monitor's own configuration is refused, before any checkpoint
    /// verified (in this run or a saved state): its API key (401, 403),
    /// or a URL with no log at it (404). Not a finding about the log;
    /// polling again would not help.
    Refused(String),
}

impl Problem {
    /// Whether the problem is a finding about the log (and not a network
    /// or load condition worth retrying).
    pub fn is_finding(&self) -> bool {
        !matches!(self, Problem::Unavailable(_) | Problem::Refused(_))
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Rollback { seen, now } => write!(
                f,
                "rollback: the log's checkpoint has {now} entries; a checkpoint of {seen} entries was seen before"
            ),
            Problem::Fork { size, seen, now } => write!(
                f,
                "fork: two checkpoints of size {size}, with roots {seen} (seen before) and {now} (now)"
            ),
            Problem::Verification(failure) => write!(
                f,
                "{} at {}: {}",
                failure.reason, failure.at, failure.detail
            ),
            Problem::Unreadable(detail) => write!(f, "unreadable: {detail}"),
            Problem::Unavailable(detail) => write!(f, "unavailable: {detail}"),
            Problem::Refused(detail) => write!(f, "refused: {detail}"),
        }
    }
}

/// What one poll saw when the log checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollReport {
    /// The checkpoint's size.
    pub size: u64,
    /// Its root.
    pub root: Hash,
    /// Records verified by this poll.
    pub new_records: u64,
}

/// Follows one log.
pub struct Monitor {
    config: MonitorConfig,
    client: Client<HttpConnector, Empty<Bytes>>,
    /// The last verified checkpoint and the origin it fixed.
    last: Option<(String, Checkpoint)>,
    verifier: Option<LogVerifier>,
    /// For each erased step still waiting for its erasure record: the log
    /// size by which the record must have been logged, and whether it was
    /// already capped by a checkpoint signed after the step was read.
    erasure_deadlines: BTreeMap<u64, (u64, bool)>,
    /// Whether a checkpoint seen by an earlier run was given: the URL was
    /// then the log's already.
    started_from_state: bool,
}

impl Monitor {
    /// A monitor that has seen nothing yet (or `config.last_seen`).
    pub fn new(config: MonitorConfig) -> Monitor {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        Monitor {
            client: Client::builder(TokioExecutor::new()).build(connector),
            last: None,
            verifier: None,
            started_from_state: config.last_seen.is_some(),
            erasure_deadlines: config
                .pending_erasures
                .iter()
                .map(|p| (p.seq, (p.deadline, p.capped)))
                .collect(),
            config,
        }
    }

    /// The erasure deadlines still pending after the last poll, for a later
    /// run ([`MonitorConfig::pending_erasures`]).
    pub fn pending_erasures(&self) -> Vec<PendingErasure> {
        self.erasure_deadlines
            .iter()
            .map(|(&seq, &(deadline, capped))| PendingErasure {
                seq,
                deadline,
                capped,
            })
            .collect()
    }

    /// Records verified since the monitor started.
    pub fn records_verified(&self) -> u64 {
        self.verifier
            .as_ref()
            .map_or(0, LogVerifier::records_checked)
    }

    /// One poll: reads the checkpoint and mirrors what is new. An `Err` is
    /// the first problem; the monitor stays failed after it.
    pub async fn poll(&mut self) -> Result<PollReport, Problem> {
        if let Some(failure) = self.verifier.as_ref().and_then(LogVerifier::failure) {
            return Err(Problem::Verification(Box::new(failure.clone())));
        }
        let note = self.get_text("checkpoint").await?;
        let cp = self.open_checkpoint(&note)?;
        let size = cp.checkpoint().size;
        let root = cp.checkpoint().root;
        if let Some((_, last)) = &self.last {
            if size < last.size {
                return Err(Problem::Rollback {
                    seen: last.size,
                    now: size,
                });
            }
            if size == last.size && root != last.root {
                return Err(Problem::Fork {
                    size,
                    seen: last.root,
                    now: root,
                });
            }
        }
        // A record tile's stated log size is the server's word: the first
        // checkpoint signed after the tile was read bounds it (an erasure
        // logged before the read is below that checkpoint's size).
        for (deadline, capped) in self.erasure_deadlines.values_mut() {
            if !*capped {
                *deadline = (*deadline).min(size);
                *capped = true;
            }
        }
        let before = self.records_verified();
        self.mirror_to(&cp).await?;
        self.last = Some((note, cp.checkpoint().clone()));
        Ok(PollReport {
            size,
            root,
            new_records: self.records_verified() - before,
        })
    }

    /// The last checkpoint note that verified, to be kept for the next run.
    pub fn last_note(&self) -> Option<&str> {
        self.last.as_ref().map(|(note, _)| note.as_str())
    }

    /// Verifies a checkpoint note: signed by a log key, with the origin of
    /// the checkpoints before it; the first one fixes the origin (and so
    /// the org) and starts the verifier.
    fn open_checkpoint(&mut self, note: &str) -> Result<VerifiedCheckpoint, Problem> {
        let origin = match &self.last {
            Some((_, last)) => last.origin.clone(),
            None => {
                let parsed = Note::parse(note)
                    .map_err(|e| Problem::Unreadable(format!("the checkpoint: {e}")))?;
                Checkpoint::parse(&parsed.text)
                    .map_err(|e| Problem::Unreadable(format!("the checkpoint: {e}")))?
                    .origin
            }
        };
        let cp = verify_checkpoint(note, &origin, &self.config.log_keys).map_err(|e| {
            Problem::Unreadable(format!(
                "the checkpoint does not verify with the log keys given: {e}"
            ))
        })?;
        if self.verifier.is_none() {
            let Some((server_name, org_id)) = origin.rsplit_once('/') else {
                return Err(Problem::Unreadable(format!(
                    "origin {origin:?} is not <server name>/<org>: not a Cairn org log"
                )));
            };
            let mut verifier =
                LogVerifier::mirroring(server_name, org_id, self.config.log_keys.clone());
            if let Some(saved) = self.config.last_seen.take() {
                let seen = verify_checkpoint(&saved, &origin, &self.config.log_keys)
                    .map_err(|e| Problem::Unreadable(format!("the checkpoint seen before: {e}")))?;
                let seen_cp = seen.checkpoint().clone();
                let now = cp.checkpoint();
                if now.size < seen_cp.size {
                    return Err(Problem::Rollback {
                        seen: seen_cp.size,
                        now: now.size,
                    });
                }
                if now.size == seen_cp.size && now.root != seen_cp.root {
                    return Err(Problem::Fork {
                        size: now.size,
                        seen: seen_cp.root,
                        now: now.root,
                    });
                }
                verifier.expect_checkpoint(&seen);
            }
            self.verifier = Some(verifier);
        }
        Ok(cp)
    }

    /// Fetches and verifies every entry from the mirror's size up to the
    /// checkpoint's.
    async fn mirror_to(&mut self, cp: &VerifiedCheckpoint) -> Result<(), Problem> {
        let size = cp.checkpoint().size;
        let Some(verifier) = self.verifier.as_mut() else {
            return Err(Problem::Unreadable("no verifier".into()));
        };
        let mut next = verifier.size();
        if size > next {
            verifier.expect_checkpoint(cp);
        } else if cp.checkpoint().root != verifier.root() {
            // Same size as the mirror (a fork from the last checkpoint is
            // caught before this; here the mirror's own tree disagrees).
            verifier.fail(
                cairn_core::verify::Location::default(),
                Reason::InconsistentCheckpoint,
                format!(
                    "the checkpoint of size {size} has root {}, the mirrored log {}",
                    cp.checkpoint().root,
                    verifier.root()
                ),
            );
        }
        while next < size {
            let index = next / TILE_WIDTH;
            let width = (size - index * TILE_WIDTH).min(TILE_WIDTH);
            let tile = |kind| Tile { kind, index, width };
            let bundle = self.get_bytes(&tile(TileKind::Entries).path()).await?;
            let hashes = self.get_bytes(&tile(TileKind::Hashes(0)).path()).await?;
            let records = self.get_text(&tile(TileKind::Records).path()).await?;
            let entries = decode_entry_bundle(&bundle)
                .map_err(|e| Problem::Unreadable(format!("entry bundle {index}: {e}")))?;
            if entries.len() as u64 != width || hashes.len() as u64 != width * 32 {
                return Err(Problem::Unreadable(format!(
                    "tile {index} of width {width}: the entry bundle holds {} entries, the hash tile {} bytes",
                    entries.len(),
                    hashes.len()
                )));
            }
            let (lines, served_size) = record_lines(&records, width)
                .map_err(|e| Problem::Unreadable(format!("record tile {index}: {e}")))?;
            let first = index * TILE_WIDTH;
            let verifier = self.verifier.as_mut().expect("set above");
            for offset in (next - first)..width {
                let seq = first + offset;
                let proven = decode_entry(lines[offset as usize]).map_err(|e| {
                    Problem::Unreadable(format!("record tile {index}, record at seq {seq}: {e}"))
                })?;
                let (entry, _) = proven;
                let leaf = cairn_core::log::log_leaf_data(
                    entry.seq,
                    entry.entry_type(),
                    &entry.record_hash(),
                    entry.logged_at,
                );
                let bundle_leaf = entries[offset as usize];
                let tile_hash = &hashes[offset as usize * 32..offset as usize * 32 + 32];
                let at = cairn_core::verify::Location {
                    seq: Some(seq),
                    ..Default::default()
                };
                if entry.seq != seq {
                    verifier.fail(
                        at,
                        Reason::SequenceGap,
                        format!(
                            "the record tile holds seq {} where seq {seq} belongs",
                            entry.seq
                        ),
                    );
                } else if leaf != bundle_leaf {
                    verifier.fail(
                        at,
                        Reason::InclusionMismatch,
                        "the record is not the leaf the entry bundle holds".into(),
                    );
                } else if cairn_core::merkle::leaf_hash(bundle_leaf).0[..] != *tile_hash {
                    verifier.fail(
                        at,
                        Reason::InclusionMismatch,
                        "the level-0 hash tile's hash is not the entry bundle's leaf".into(),
                    );
                } else {
                    verifier.push(&entry);
                }
                if let Some(failure) = verifier.failure() {
                    return Err(Problem::Verification(Box::new(failure.clone())));
                }
            }
            for seq in verifier.pending_erasures() {
                self.erasure_deadlines
                    .entry(seq)
                    .or_insert((served_size, false));
            }
            next = first + width;
        }
        let verifier = self.verifier.as_mut().expect("set above");
        // The checkpoint's key must be valid at its size (a key retired
        // in the log below it may not sign it), and its log-keys line
        // must count the log-key records below it (FORMAT.md 7.1, 7.10).
        verifier.check_checkpoint_keys_now(cp.note(), size);
        let pending = verifier.pending_erasures();
        self.erasure_deadlines
            .retain(|seq, _| pending.contains(seq));
        let overdue = self
            .erasure_deadlines
            .iter()
            .find(|(_, (deadline, _))| *deadline <= verifier.size())
            .map(|(seq, (deadline, _))| (*seq, *deadline));
        if let Some((seq, deadline)) = overdue {
            verifier.fail_pending_erasure(
                seq,
                format!(
                    "the entry at seq {seq} (an erased step's payload, or a withheld signed trace) was seen erased when the log had {deadline} entries, but no erasure record below that names it"
                ),
            );
        }
        match verifier.failure() {
            Some(failure) => Err(Problem::Verification(Box::new(failure.clone()))),
            None => Ok(()),
        }
    }

    async fn get_text(&self, path: &str) -> Result<String, Problem> {
        let bytes = self.get_bytes(path).await?;
        String::from_utf8(bytes).map_err(|_| Problem::Unreadable(format!("{path} is not UTF-8")))
    }

    async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, Problem> {
        let url = format!("{}/{path}", self.config.prefix);
        let unreadable = |detail: String| Problem::Unreadable(format!("GET {url}: {detail}"));
        let unavailable = |detail: String| Problem::Unavailable(format!("GET {url}: {detail}"));
        let request = axum::http::Request::get(&url)
            .header(
                axum::http::header::AUTHORIZATION,
                format!("Bearer {}", self.config.api_key),
            )
            .body(Empty::new())
            .map_err(|e| unreadable(e.to_string()))?;
        let response = tokio::time::timeout(Duration::from_secs(30), self.client.request(request))
            .await
            .map_err(|_| unavailable("no answer within 30 s".into()))?
            .map_err(|e| unavailable(e.to_string()))?;
        let status = response.status();
        let gzip = response
            .headers()
            .get(axum::http::header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let limit = self.config.max_response_bytes;
        let body = tokio::time::timeout(
            Duration::from_secs(120),
            Limited::new(response.into_body(), limit).collect(),
        )
        .await
        .map_err(|_| unavailable("the answer did not arrive within 120 s".into()))?
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                unreadable(format!(
                    "the answer is over {limit} bytes (--max-response-bytes)"
                ))
            } else {
                unavailable(e.to_string())
            }
        })?
        .to_bytes();
        if status.is_server_error() || status.as_u16() == 429 {
            return Err(unavailable(format!("{status}")));
        }
        let said = || String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
        // Before a checkpoint ever verified (in this run or a saved
        // state), a refused key or a missing checkpoint is the monitor's
        // configuration; once one has, the prefix and the key were the
        // log's, and anything withheld that the checkpoint commits to is a
        // finding (a server restarted to withhold tiles, or refusing a key
        // it took, must not pass for a monitor's misconfiguration).
        let configuring = self.verifier.is_none() && !self.started_from_state;
        if configuring && matches!(status.as_u16(), 401 | 403) {
            return Err(Problem::Refused(format!(
                "GET {url}: {status}: {}: the monitor's API key must be an auditor's or an admin's of the org (--api-key, CAIRN_API_KEY)",
                said()
            )));
        }
        if configuring && status.as_u16() == 404 {
            return Err(Problem::Refused(format!(
                "GET {url}: {status}: no log at this URL: give the tlog prefix, <server>/v1/tlog (docs/OPERATIONS.md, \"Monitors\")"
            )));
        }
        // Cairn also answers `/v1/checkpoint`: a prefix of `/v1` verifies
        // the checkpoint and then finds no tile. Still a finding (the
        // checkpoint committed to it), said with the likely cause.
        let hint = if status.as_u16() == 404 && !self.config.prefix.ends_with("/tlog") {
            " (is the URL the log's tlog prefix, <server>/v1/tlog?)"
        } else {
            ""
        };
        if !status.is_success() {
            return Err(unreadable(format!("{status}: {}{hint}", said())));
        }
        if gzip {
            use std::io::Read as _;
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| unreadable(format!("gzip: {e}")))?;
            if out.len() > limit {
                return Err(unreadable(format!("over {limit} bytes once unzipped")));
            }
            return Ok(out);
        }
        Ok(body.to_vec())
    }
}

/// The record lines of a record tile of `width` records and the log size
/// its end line gives.
fn record_lines(body: &str, width: u64) -> Result<(Vec<&str>, u64), String> {
    let mut lines: Vec<&str> = body.lines().collect();
    let Some(end) = lines.pop() else {
        return Err("the tile is empty".into());
    };
    let end: serde_json::Value = serde_json::from_str(end)
        .map_err(|_| "the tile does not end with its end line: it was cut short".to_owned())?;
    let entries = end.pointer("/tile_end/entries").and_then(|v| v.as_u64());
    let log_size = end.pointer("/tile_end/log_size").and_then(|v| v.as_u64());
    match (entries, log_size) {
        (Some(n), Some(size)) if n == width && lines.len() as u64 == width => Ok((lines, size)),
        (Some(_), Some(_)) => Err(format!(
            "the tile holds {} records (its end line says {}), not {width}",
            lines.len(),
            entries.unwrap_or_default()
        )),
        _ => Err("the tile does not end with its end line: it was cut short".into()),
    }
}
