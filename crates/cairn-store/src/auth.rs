//! API keys: org-scoped, with a role and optionally bound to one agent.
//!
//! A key is shown once, as a token `cairn_<id>_<secret>` (the id is public,
//! the secret 32 random bytes in base64url); only SHA-256 of the whole token
//! is stored, so a copy of the database does not hold usable keys.

use crate::StoreError;
use cairn_core::{Hash, Timestamp};
use std::fmt;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Append steps and sessions, seal, and read its org.
    Writer,
    /// Read its org.
    Reader,
    /// Read, verify and export its org.
    Auditor,
    /// Everything in its org, including managing keys.
    Admin,
}

impl Role {
    /// `writer`, `reader`, `auditor` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Reader => "reader",
            Role::Auditor => "auditor",
            Role::Admin => "admin",
        }
    }

    /// Parses the names of [`Role::as_str`].
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "writer" => Some(Role::Writer),
            "reader" => Some(Role::Reader),
            "auditor" => Some(Role::Auditor),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    /// May append and seal.
    pub fn can_write(self) -> bool {
        matches!(self, Role::Writer | Role::Admin)
    }

    /// May record review decisions on flagged steps (seed 003's human
    /// oversight).
    pub fn can_review(self) -> bool {
        matches!(self, Role::Auditor | Role::Admin)
    }

    /// May export bundles.
    pub fn can_export(self) -> bool {
        matches!(self, Role::Auditor | Role::Admin)
    }

    /// May manage keys.
    pub fn can_admin(self) -> bool {
        self == Role::Admin
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored API key (without its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Public id (12 hex digits), the middle part of the token.
    pub id: String,
    /// The org it is scoped to.
    pub org_id: String,
    /// What it may do.
    pub role: Role,
    /// If set, it may only write as this agent.
    pub agent_id: Option<String>,
    /// SHA-256 of the whole token.
    pub token_hash: Hash,
    /// A label for people.
    pub label: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
    /// When it stops working, if it was made to expire: from then on it is
    /// refused as a revoked key is (it stays listed, and can be revoked).
    pub expires_at: Option<Timestamp>,
}

impl ApiKey {
    /// Makes a new key and its token (to show once).
    pub fn generate(
        org_id: &str,
        role: Role,
        agent_id: Option<&str>,
        label: &str,
        now: Timestamp,
    ) -> Result<(ApiKey, String), StoreError> {
        use base64::Engine as _;
        let mut id = [0u8; 6];
        let mut secret = [0u8; 32];
        getrandom::fill(&mut id)
            .and_then(|()| getrandom::fill(&mut secret))
            .map_err(|e| StoreError::Key(format!("no entropy source: {e}")))?;
        let id = hex::encode(id);
        let token = format!(
            "cairn_{id}_{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
        );
        let key = ApiKey {
            id,
            org_id: org_id.to_owned(),
            role,
            agent_id: agent_id.map(str::to_owned),
            token_hash: token_hash(&token),
            label: label.to_owned(),
            created_at: now,
            revoked_at: None,
            expires_at: None,
        };
        Ok((key, token))
    }

    /// Whether the key works at `now`: not revoked, and not expired.
    pub fn usable_at(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|end| now < end)
    }
}

/// The most bytes a key's label holds: it is listed with every key.
pub const MAX_KEY_LABEL_BYTES: usize = 256;

/// Why a new key's label is refused, if it is: longer than
/// [`MAX_KEY_LABEL_BYTES`], or holding a control character (a NUL, which
/// PostgreSQL cannot store in text; a line break, which would split the
/// CLI's listing). For a person: the API and the CLI quote it.
pub fn key_label_refused(label: &str) -> Option<String> {
    if label.len() > MAX_KEY_LABEL_BYTES {
        Some(format!(
            "the label is {} bytes; a key's label is at most {MAX_KEY_LABEL_BYTES}",
            label.len()
        ))
    } else if label
        .chars()
        .any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
    {
        Some("the label holds a control character (such as NUL or a line break); a key's label is one line of text".into())
    } else {
        None
    }
}

/// A new key's end from its RFC 3339 text (or a date: its start in UTC):
/// a time after `now`, or why
/// not (for a person: the API and the CLI quote it).
pub fn key_expiry(text: &str, now: Timestamp) -> Result<Timestamp, String> {
    // The parser's own message speaks of UTC (what a step's timestamp
    // must be); a key's end may carry any offset, so it is not quoted.
    // Nor is the text: a token pasted here by mistake would be echoed,
    // and an escaped character can split it past the answers' masking.
    // A date alone (2027-01-31), as listings and exports take one, is
    // that day's start in UTC.
    let date = (text.len() == 10 && text.as_bytes().get(4) == Some(&b'-'))
        .then(|| Timestamp::parse_rfc3339(&format!("{text}T00:00:00Z")).ok())
        .flatten();
    let at = date.map_or_else(|| Timestamp::parse_rfc3339(text), Ok).map_err(|_| {
        "must be an RFC 3339 time such as 2027-01-31T00:00:00Z or 2027-01-31T09:00:00+09:00, or a date (2027-01-31: its start, in UTC)"
            .to_owned()
    })?;
    if at <= now {
        return Err(format!("({at}) is not in the future (now {now})"));
    }
    Ok(at)
}

/// The stored hash of a token.
pub fn token_hash(token: &str) -> Hash {
    Hash::sha256(token.as_bytes())
}

/// What [`crate::LedgerStore::revoke_api_key_unless_last_admin`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRevocation {
    /// The key is revoked now.
    Revoked,
    /// No such key in use in the org (or none bound to the agent named).
    Unknown,
    /// The org's last admin key in use that is not bound to an agent: not
    /// revoked, so that the org keeps a key that can manage every key.
    LastAdmin,
}

/// The statement that revokes a key unless it is its org's last admin key
/// in use not bound to an agent, in one statement so that the check and
/// the revocation are one (`?1` org, `?2` key id, `?3` time, `?4` the agent
/// the key must be bound to, or NULL).
pub(crate) const REVOKE_UNLESS_LAST_ADMIN: &str = "UPDATE api_keys SET revoked_at = ?3
 WHERE org_name = ?1 AND id = ?2 AND revoked_at IS NULL
   AND (?4 IS NULL OR agent_id = ?4)
   AND (role <> 'admin' OR agent_id IS NOT NULL OR expires_at <= ?3 OR EXISTS (
        SELECT 1 FROM api_keys other
         WHERE other.org_name = ?1 AND other.id <> ?2 AND other.role = 'admin'
           AND other.agent_id IS NULL AND other.revoked_at IS NULL
           AND (other.expires_at IS NULL OR other.expires_at > ?3)))";

/// [`REVOKE_UNLESS_LAST_ADMIN`] in PostgreSQL's spelling.
pub(crate) const REVOKE_UNLESS_LAST_ADMIN_PG: &str = "UPDATE api_keys SET revoked_at = $3
 WHERE org_name = $1 AND id = $2 AND revoked_at IS NULL
   AND ($4::text IS NULL OR agent_id = $4::text)
   AND (role <> 'admin' OR agent_id IS NOT NULL OR expires_at <= $3 OR EXISTS (
        SELECT 1 FROM api_keys other
         WHERE other.org_name = $1 AND other.id <> $2 AND other.role = 'admin'
           AND other.agent_id IS NULL AND other.revoked_at IS NULL
           AND (other.expires_at IS NULL OR other.expires_at > $3)))";

/// After [`REVOKE_UNLESS_LAST_ADMIN`] changed nothing: whether the key is
/// there in use (so it was kept as the last admin key) or not at all.
pub(crate) const KEY_IN_USE: &str = "SELECT count(*) FROM api_keys
 WHERE org_name = ?1 AND id = ?2 AND revoked_at IS NULL AND (?3 IS NULL OR agent_id = ?3)";

/// [`KEY_IN_USE`] in PostgreSQL's spelling.
pub(crate) const KEY_IN_USE_PG: &str = "SELECT count(*) FROM api_keys
 WHERE org_name = $1 AND id = $2 AND revoked_at IS NULL AND ($3::text IS NULL OR agent_id = $3::text)";
