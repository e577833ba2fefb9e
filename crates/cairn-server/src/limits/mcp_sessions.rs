//! The MCP sessions open over HTTP and who may use them: at most
//! [`Limits::mcp_sessions_per_key`] per key, half of
//! [`Limits::mcp_sessions`] per org and that many in all, each usable
//! (or deletable) only with the key that opened it.

use super::Limits;
use crate::ApiError;
use crate::error::shown;
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The MCP sessions open over HTTP: which key opened each, when it was
/// last used, and how many each key is opening right now.
pub(crate) struct McpSessions {
    manager: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    table: Mutex<SessionTable>,
}

/// Who holds an MCP session: the key that opened it, and the key's org.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Holder {
    key: String,
    org: String,
}

#[derive(Default)]
struct SessionTable {
    /// Session id to its holder and last use.
    owners: HashMap<String, (Holder, Instant)>,
    /// Sessions being opened, by holder.
    pending: HashMap<Holder, usize>,
    /// Keys revoked lately, with when: a session such a key was opening
    /// as it was revoked is ended by the next sweep. Kept a minute, past
    /// the key cache's few seconds.
    revoked: HashMap<String, Instant>,
}

impl SessionTable {
    /// Sessions open or being opened whose holder `matches`.
    fn count(&self, matches: impl Fn(&Holder) -> bool) -> usize {
        self.owners.values().filter(|(h, _)| matches(h)).count()
            + self
                .pending
                .iter()
                .filter(|(h, _)| matches(h))
                .map(|(_, n)| n)
                .sum::<usize>()
    }

    fn total(&self) -> usize {
        self.owners.len() + self.pending.values().sum::<usize>()
    }
}

/// A session being opened; counted until it is confirmed or dropped.
pub(crate) struct Reservation<'a> {
    sessions: &'a McpSessions,
    holder: Holder,
}

impl Reservation<'_> {
    /// The session opened: `id` now belongs to the key.
    pub(crate) fn confirm(self, id: &str) {
        if let Ok(mut table) = self.sessions.table.lock() {
            table
                .owners
                .insert(id.to_owned(), (self.holder.clone(), Instant::now()));
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Ok(mut table) = self.sessions.table.lock()
            && let Some(n) = table.pending.get_mut(&self.holder)
        {
            *n -= 1;
            if *n == 0 {
                table.pending.remove(&self.holder);
            }
        }
    }
}

impl McpSessions {
    pub(crate) fn new(
        manager: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    ) -> McpSessions {
        McpSessions {
            manager,
            table: Mutex::new(SessionTable::default()),
        }
    }

    /// Forgets sessions that were idle too long (ending them) or that the
    /// MCP server already ended.
    async fn sweep(&self, idle: Duration) {
        // A session confirmed (or used) after the live list was read is not
        // in it yet: it is kept, or a burst of `initialize`s could drop each
        // other's sessions from the table and so escape every limit.
        let listed_at = Instant::now();
        let live: std::collections::HashSet<String> = self
            .manager
            .sessions
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect();
        let expired: Vec<String> = match self.table.lock() {
            Ok(mut table) => {
                let SessionTable {
                    owners, revoked, ..
                } = &mut *table;
                // Idle too long, or opened by a key revoked as it opened.
                let ended = |holder: &Holder, last: &Instant| {
                    last.elapsed() > idle || revoked.contains_key(&holder.key)
                };
                let expired: Vec<String> = owners
                    .iter()
                    .filter(|(_, (holder, last))| ended(holder, last))
                    .map(|(id, _)| id.clone())
                    .collect();
                owners.retain(|id, (holder, last)| {
                    (live.contains(id) || *last >= listed_at) && !ended(holder, last)
                });
                expired
            }
            Err(_) => Vec::new(),
        };
        self.close(expired).await;
    }

    /// Ends these sessions in the MCP server.
    async fn close(&self, ids: Vec<String>) {
        use rmcp::transport::streamable_http_server::session::SessionManager as _;
        for id in ids {
            let _ = self.manager.close_session(&id.as_str().into()).await;
        }
    }

    /// Ends every MCP session `key` opened (the key was revoked: its
    /// sessions could not be used again, and would count against its
    /// org's share until they went idle).
    pub(crate) async fn end_key(&self, key: &str) {
        let ended: Vec<String> = match self.table.lock() {
            Ok(mut table) => {
                let ended = table
                    .owners
                    .iter()
                    .filter(|(_, (holder, _))| holder.key == key)
                    .map(|(id, _)| id.clone())
                    .collect();
                table.owners.retain(|_, (holder, _)| holder.key != key);
                table
                    .revoked
                    .retain(|_, at| at.elapsed() < Duration::from_secs(60));
                table.revoked.insert(key.to_owned(), Instant::now());
                ended
            }
            Err(_) => Vec::new(),
        };
        self.close(ended).await;
    }

    /// Reserves a session for `key` of `org`, within the per-key limit,
    /// the org's share (half of the total, so that the keys of one org,
    /// which an admin may create at will, never hold every session) and
    /// the total.
    pub(crate) async fn reserve(
        &self,
        key: &str,
        org: &str,
        limits: &Limits,
    ) -> Result<Reservation<'_>, ApiError> {
        self.sweep(limits.mcp_session_idle).await;
        let mut table = self.table.lock().map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the session table is unusable",
            )
        })?;
        if table.count(|h| h.key == key) >= limits.mcp_sessions_per_key {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_sessions",
                format!(
                    "this API key has {} MCP sessions open, the most it may (CAIRN_MCP_SESSIONS_PER_KEY): end one (DELETE /mcp with its Mcp-Session-Id) or let one expire ({} s idle)",
                    limits.mcp_sessions_per_key,
                    limits.mcp_session_idle.as_secs()
                ),
            )
            .retry_after(limits.mcp_session_idle));
        }
        let org_share = (limits.mcp_sessions / 2).max(1);
        if table.count(|h| h.org == org) >= org_share {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_sessions",
                format!(
                    "org {} has {org_share} MCP sessions open, the most one org may (half of CAIRN_MCP_SESSIONS): end some (DELETE /mcp with their Mcp-Session-Id) or let them expire ({} s idle)",
                    shown(org),
                    limits.mcp_session_idle.as_secs()
                ),
            )
            .retry_after(limits.mcp_session_idle));
        }
        if table.total() >= limits.mcp_sessions {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                format!(
                    "the server has {} MCP sessions open, the most it may (CAIRN_MCP_SESSIONS); retry later",
                    limits.mcp_sessions
                ),
            )
            .retry_after(Duration::from_secs(10)));
        }
        let holder = Holder {
            key: key.to_owned(),
            org: org.to_owned(),
        };
        *table.pending.entry(holder.clone()).or_default() += 1;
        Ok(Reservation {
            sessions: self,
            holder,
        })
    }

    /// Whether session `id` was opened by `key` (and is still open); marks
    /// it used.
    pub(crate) fn use_session(&self, id: &str, key: &str, idle: Duration) -> bool {
        match self.table.lock() {
            Ok(mut table) => match table.owners.get_mut(id) {
                Some((owner, last)) if owner.key == key && last.elapsed() <= idle => {
                    *last = Instant::now();
                    true
                }
                _ => false,
            },
            Err(_) => false,
        }
    }

    /// Forgets session `id` (ended by its key, or by the MCP server).
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut table) = self.table.lock() {
            table.owners.remove(id);
        }
    }

    /// Sessions open now.
    pub(crate) fn open(&self) -> usize {
        self.table.lock().map(|t| t.owners.len()).unwrap_or(0)
    }
}
