//! The slots for expensive work and for OTLP requests (the server's, and
//! each org's half), and the streamed replays' buffer: taken within a
//! wait, at once, or in turn.

use super::Limits;
use crate::error::shown;
use crate::{ApiError, AppState};
use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The slots for expensive work: the server's, and each org's share of
/// them. One org holds at most half of the server's slots (at least one),
/// so that one tenant's runaway queries, exports or verifications can keep
/// every other tenant waiting for at most the other half, never for all.
pub(crate) struct ExpensiveSlots {
    server: Arc<tokio::sync::Semaphore>,
    /// Each org's share, created on its first expensive request; an org's
    /// entry is dropped again when the map grows past
    /// [`ExpensiveSlots::ORGS_KEPT`] and nobody of that org holds a slot.
    orgs: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    per_org: usize,
}

impl ExpensiveSlots {
    /// How many orgs' shares are kept before idle ones are dropped.
    const ORGS_KEPT: usize = 10_000;

    /// `total` slots (at least one), an org holding at most half.
    pub(crate) fn new(total: usize) -> ExpensiveSlots {
        let total = total.max(1);
        ExpensiveSlots {
            server: Arc::new(tokio::sync::Semaphore::new(total)),
            orgs: std::sync::Mutex::new(HashMap::new()),
            per_org: (total / 2).max(1),
        }
    }

    /// Slots one org may hold at once.
    pub(crate) fn per_org(&self) -> usize {
        self.per_org
    }

    /// Free slots of the server (for `/metrics`).
    pub(crate) fn available(&self) -> usize {
        self.server.available_permits()
    }

    fn org_share(&self, org: &str) -> Arc<tokio::sync::Semaphore> {
        let mut orgs = self
            .orgs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if orgs.len() >= Self::ORGS_KEPT && !orgs.contains_key(org) {
            orgs.retain(|_, share| Arc::strong_count(share) > 1);
        }
        Arc::clone(
            orgs.entry(org.to_owned())
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.per_org))),
        )
    }
}

/// A slot for expensive work, held until the work is done (move it into
/// the blocking task or the response stream).
pub(crate) struct ExpensiveSlot {
    _org: tokio::sync::OwnedSemaphorePermit,
    _server: tokio::sync::OwnedSemaphorePermit,
}

/// The smallest replay buffer: an org's half leaves room for one
/// replay's headroom and a few slow readers.
const MIN_REPLAY_BUFFER_BYTES: usize = 32 * 1024 * 1024;

/// The replay buffer's size: [`Limits::replay_buffer_bytes`], raised to
/// 32 MiB if set lower.
pub(crate) fn replay_buffer_bytes(limits: &Limits) -> usize {
    limits.replay_buffer_bytes.max(MIN_REPLAY_BUFFER_BYTES)
}

/// A reservation of `bytes` of the streamed replays' buffer for `org`
/// (rounded up to whole KiB, the buffer's unit), held until dropped: its
/// org's share first, then the server's, within
/// [`Limits::expensive_wait`]; past it, `503 overloaded`. A reservation
/// that, with `headroom` more, would pass one org's share can never be
/// served: `422 answer_too_large` at once.
pub(crate) async fn replay_buffer(
    state: &AppState,
    org: &str,
    bytes: usize,
    headroom: usize,
) -> Result<ExpensiveSlot, ApiError> {
    let slots = &state.replay_buffer;
    let units = bytes.div_ceil(1024).max(1);
    let limit = replay_buffer_bytes(&state.config.limits);
    let needed = units.saturating_add(headroom.div_ceil(1024));
    let (Ok(units), true) = (u32::try_from(units), needed <= slots.per_org) else {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "answer_too_large",
            format!(
                "this replay would hold {} bytes at once, more than one org's share of the replay buffer ({} of CAIRN_REPLAY_BUFFER_BYTES {limit}): export the session instead (GET /v1/export?session=...), which streams it from the log",
                bytes.saturating_add(headroom),
                slots.per_org * 1024
            ),
        ));
    };
    take(slots, org, units, Some(state.config.limits.expensive_wait), |full| match full {
        Full::Org => format!(
            "org {}'s streamed replays hold as much of the replay buffer as one org may (half of CAIRN_REPLAY_BUFFER_BYTES {limit}): retry when one of them ends",
            shown(org)
        ),
        Full::Server => format!(
            "the server's streamed replays hold its whole replay buffer (CAIRN_REPLAY_BUFFER_BYTES {limit}): retry shortly"
        ),
    })
    .await
}

/// A permit to read one replay batch for `org` (at most
/// [`crate::sessions::REPLAY_READS`] at once in the server, one org at
/// most half), within `wait` if given; past it, `503 overloaded`.
pub(crate) async fn replay_read(
    state: &AppState,
    org: &str,
    wait: Option<Duration>,
) -> Result<ExpensiveSlot, ApiError> {
    take(&state.replay_reads, org, 1, wait, |full| match full {
        Full::Org => format!(
            "org {} is reading as many replay batches at once as one org may: retry shortly",
            shown(org)
        ),
        Full::Server => {
            "the server is reading as many replay batches at once as it may: retry shortly"
                .to_owned()
        }
    })
    .await
}

impl ExpensiveSlot {
    /// Adds `other`'s reservation to this one (of the same slots).
    pub(crate) fn merge(&mut self, other: ExpensiveSlot) {
        self._org.merge(other._org);
        self._server.merge(other._server);
    }

    /// Keeps only what `bytes` need of a replay-buffer reservation (whole
    /// KiB, at least one), giving the rest back.
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        let keep = bytes.div_ceil(1024).max(1);
        for permit in [&mut self._org, &mut self._server] {
            if let Some(extra) = permit.num_permits().checked_sub(keep) {
                drop(permit.split(extra));
            }
        }
    }
}

/// Which share of the slots was full.
pub(crate) enum Full {
    Org,
    Server,
}

/// `503 overloaded` with `Retry-After: 1`.
pub(crate) fn overloaded(message: String) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message)
        .retry_after(Duration::from_secs(1))
}

/// Takes `units` of `org`'s share of `slots`, then of the server's, both
/// within `wait` in all (as long as it takes if `None`); past it, `503
/// overloaded` with the message `full` gives for the share that was full.
async fn take(
    slots: &ExpensiveSlots,
    org: &str,
    units: u32,
    wait: Option<Duration>,
    full: impl FnOnce(Full) -> String,
) -> Result<ExpensiveSlot, ApiError> {
    async fn within<T>(
        deadline: Option<tokio::time::Instant>,
        acquire: impl std::future::Future<Output = Result<T, tokio::sync::AcquireError>>,
    ) -> Option<T> {
        match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, acquire).await.ok()?.ok(),
            None => acquire.await.ok(),
        }
    }
    let deadline = wait.map(|wait| tokio::time::Instant::now() + wait);
    let org_share = slots.org_share(org);
    let Some(org_permit) = within(deadline, org_share.acquire_many_owned(units)).await else {
        return Err(overloaded(full(Full::Org)));
    };
    let server = Arc::clone(&slots.server);
    let Some(server_permit) = within(deadline, server.acquire_many_owned(units)).await else {
        return Err(overloaded(full(Full::Server)));
    };
    Ok(ExpensiveSlot {
        _org: org_permit,
        _server: server_permit,
    })
}

/// A slot for expensive work of `org`: first one of the org's share, then
/// one of the server's, both within [`Limits::expensive_wait`] in all;
/// past it, `503 overloaded` saying which was full.
pub(crate) async fn expensive(
    state: &AppState,
    org: &str,
    what: &str,
) -> Result<ExpensiveSlot, ApiError> {
    let slots = &state.expensive;
    let total = state.config.limits.max_expensive.max(1);
    take(slots, org, 1, Some(state.config.limits.expensive_wait), |full| match full {
        Full::Org => format!(
            "org {} is running as many expensive operations (verification, export, SQL, search, answers held whole, entry bundles) as one org may ({} of the server's {total}): {what} was not started; retry when one of them ends",
            shown(org),
            slots.per_org,
        ),
        Full::Server => format!(
            "the server is running as many expensive operations (verification, export, SQL, search, answers held whole, entry bundles) as it may ({total}): {what} was not started; retry shortly"
        ),
    })
    .await
}

/// A slot of `slots` for `org`, of its share and of the server's, waited
/// for as long as it takes (OTLP decoding waits its turn; a refusal there
/// would make exporters send the whole batch again). Fails only when the
/// slots are closed.
pub(crate) async fn slot_in_turn(
    slots: &ExpensiveSlots,
    org: &str,
) -> Result<ExpensiveSlot, ApiError> {
    take(slots, org, 1, None, |_| {
        "the server is shutting down".to_owned()
    })
    .await
}

/// A slot for expensive work of `org` if one is free now (of its org's
/// share and of the server's), else `None`: for work that is left out
/// rather than waited for, as a session listing's chain verification
/// ([`crate::sessions::listing_slot`]).
pub(crate) fn expensive_now(state: &AppState, org: &str) -> Option<ExpensiveSlot> {
    slot_now(&state.expensive, org).ok()
}

/// A slot of `slots` for `org` if one is free now, of its org's share and
/// of the server's; else which was full.
pub(crate) fn slot_now(slots: &ExpensiveSlots, org: &str) -> Result<ExpensiveSlot, Full> {
    let org_permit = slots
        .org_share(org)
        .try_acquire_owned()
        .map_err(|_| Full::Org)?;
    let server_permit = Arc::clone(&slots.server)
        .try_acquire_owned()
        .map_err(|_| Full::Server)?;
    Ok(ExpensiveSlot {
        _org: org_permit,
        _server: server_permit,
    })
}
