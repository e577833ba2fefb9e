//! Memory that requests hold while they are served, counted against one
//! budget per kind (parsed bodies, OTLP steps not yet written).

use std::collections::HashMap;
use std::sync::Arc;

/// Memory that requests hold for a while (parsed JSON bodies, OTLP steps
/// not yet written), counted against a limit, and with an org named,
/// against half of it for that org: a request that would take what all
/// hold (or its org's share) past it is refused (to retry), unless nothing
/// is held there, so that one request alone always goes through whatever
/// its size, and one org's requests leave the other half to other orgs.
pub(crate) struct MemoryBudget {
    held: Arc<std::sync::Mutex<Held>>,
    limit: usize,
}

/// What is held, in all and per org (orgs holding nothing are dropped).
#[derive(Default)]
struct Held {
    total: usize,
    orgs: HashMap<String, usize>,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> MemoryBudget {
        MemoryBudget {
            held: Arc::default(),
            limit,
        }
    }

    /// Counts `bytes` as held (by `org`, if named) until the guard is
    /// dropped; `Err` with what is held where it would pass its limit.
    pub(crate) fn hold(&self, org: Option<&str>, bytes: usize) -> Result<HeldMemory, usize> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.total > 0 && held.total.saturating_add(bytes) > self.limit {
            return Err(held.total);
        }
        if let Some(org) = org {
            let of_org = held.orgs.get(org).copied().unwrap_or(0);
            if of_org > 0 && of_org.saturating_add(bytes) > self.limit / 2 {
                return Err(of_org);
            }
            *held.orgs.entry(org.to_owned()).or_default() += bytes;
        }
        held.total += bytes;
        Ok(HeldMemory {
            held: Arc::clone(&self.held),
            org: org.map(str::to_owned),
            bytes,
            limit: self.limit,
        })
    }

    /// What requests (and the writes they queued) hold now.
    pub(crate) fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// Memory a request holds, given back when it is dropped.
pub(crate) struct HeldMemory {
    held: Arc<std::sync::Mutex<Held>>,
    org: Option<String>,
    bytes: usize,
    limit: usize,
}

impl HeldMemory {
    /// The bytes counted for the request so far.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Counts `more` bytes for the same request (what it builds from its
    /// body: steps, an answer): refused as [`MemoryBudget::hold`] refuses,
    /// except that what this request already holds does not count as
    /// another's, so a request alone still always goes through.
    pub(crate) fn grow(&mut self, more: usize) -> Result<(), usize> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let others = held.total - self.bytes;
        if others > 0 && held.total.saturating_add(more) > self.limit {
            return Err(held.total);
        }
        if let Some(org) = &self.org {
            let of_org = held.orgs.get(org).copied().unwrap_or(0);
            if of_org > self.bytes && of_org.saturating_add(more) > self.limit / 2 {
                return Err(of_org);
            }
            *held.orgs.entry(org.clone()).or_default() += more;
        }
        held.total += more;
        self.bytes += more;
        Ok(())
    }
}

/// What one request holds, shared by the parts of the server that serve
/// it (an MCP request's body is counted by the HTTP layer, its steps by
/// the tool): grown as it builds more, given back when the last part
/// drops it.
#[derive(Clone)]
pub(crate) struct RequestMemory(Arc<std::sync::Mutex<HeldMemory>>);

impl RequestMemory {
    /// The request's memory, starting with what `held` counts.
    pub(crate) fn new(held: HeldMemory) -> RequestMemory {
        RequestMemory(Arc::new(std::sync::Mutex::new(held)))
    }

    /// [`HeldMemory::grow`] for the request.
    pub(crate) fn grow(&self, more: usize) -> Result<(), usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).grow(more)
    }
}

/// What a write handed to the ledger keeps counted until the ledger has
/// answered it and let go of it ([`cairn_store::Ledger::submit_holding`]),
/// even when the request that made it is gone: a client that hangs up
/// stops waiting, but its queued steps are still written, and still hold
/// their memory until they are. The request's shared count, or the bytes
/// counted on their own (a request without a count, as over MCP's stdio).
#[derive(Clone)]
pub(crate) struct UntilWritten {
    // Kept only to be dropped: each gives back its count when the last
    // clone goes.
    _request: Option<RequestMemory>,
    _own: Option<Arc<HeldMemory>>,
}

impl UntilWritten {
    /// Keeps `request`'s count, and `own`, until every write given
    /// [`UntilWritten::hold`] is answered.
    pub(crate) fn new(request: Option<&RequestMemory>, own: Option<HeldMemory>) -> UntilWritten {
        UntilWritten {
            _request: request.cloned(),
            _own: own.map(Arc::new),
        }
    }

    /// Nothing counted: a write whose request has no count of its own (a
    /// web form's small fields).
    pub(crate) fn nothing() -> UntilWritten {
        UntilWritten::new(None, None)
    }

    /// A hold for one write ([`cairn_store::Ledger::submit_holding`]).
    pub(crate) fn hold(&self) -> cairn_store::Hold {
        Box::new(self.clone())
    }
}

impl Drop for HeldMemory {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.total -= self.bytes;
        if let Some(org) = &self.org
            && let Some(of_org) = held.orgs.get_mut(org)
        {
            *of_org -= self.bytes;
            if *of_org == 0 {
                held.orgs.remove(org);
            }
        }
    }
}

/// `response` with its body holding `guard` until the body is done or
/// dropped (the client left): what a request holds (a stream's place, its
/// body's parsed memory) is held for as long as its answer is produced,
/// which for MCP's event streams is until the tool has finished.
pub(crate) fn holding_until_sent<G: Send + Sync + Unpin + 'static>(
    response: axum::response::Response,
    guard: G,
) -> axum::response::Response {
    use futures_core::Stream;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    struct Guarded<G> {
        inner: axum::body::BodyDataStream,
        _guard: G,
    }
    impl<G: Unpin> Stream for Guarded<G> {
        type Item = Result<axum::body::Bytes, axum::Error>;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            Pin::new(&mut self.inner).poll_next(cx)
        }
    }
    response.map(|body| {
        axum::body::Body::from_stream(Guarded {
            inner: body.into_data_stream(),
            _guard: guard,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What requests hold is bounded: one alone goes through whatever its
    /// size, one that would pass the limit is refused with what is held,
    /// and what a finished request held is given back.
    #[test]
    fn memory_budgets_bound_what_requests_hold() {
        let budget = MemoryBudget::new(100);
        let alone = budget.hold(None, 1_000).expect("alone, any size");
        assert_eq!(budget.hold(None, 1).err(), Some(1_000));
        drop(alone);
        let a = budget.hold(None, 60).unwrap();
        assert_eq!(budget.hold(None, 41).err(), Some(60));
        let b = budget.hold(None, 40).unwrap();
        drop(a);
        assert_eq!(budget.held(), 40);
        drop(b);
        assert_eq!(budget.held(), 0);
        // An org holds at most half: its second large body waits, another
        // org's goes through.
        let first = budget.hold(Some("greedy"), 45).unwrap();
        assert_eq!(budget.hold(Some("greedy"), 10).err(), Some(45));
        let other = budget.hold(Some("other"), 45).unwrap();
        let small = budget.hold(Some("greedy"), 5).unwrap();
        drop((first, other, small));
        assert_eq!(budget.held(), 0);
        // A request that grows is alone while only it holds memory: it
        // goes through whatever it adds; beside another, it is refused
        // past the limit.
        let mut alone = budget.hold(Some("big"), 40).unwrap();
        alone.grow(500).expect("alone, any size");
        assert_eq!(budget.hold(Some("small"), 5).err(), Some(540));
        drop(alone);
        let mut first = budget.hold(Some("big"), 30).unwrap();
        let mut second = budget.hold(Some("small"), 5).unwrap();
        assert_eq!(second.grow(70).err(), Some(35), "beside another");
        first.grow(60).expect("alone in its org, within the limit");
        assert_eq!(first.grow(10).err(), Some(95), "past the limit");
        second.grow(5).unwrap();
        drop(first);
        // Beside another request of its org, past the org's half.
        let mut third = budget.hold(Some("small"), 1).unwrap();
        assert_eq!(third.grow(45).err(), Some(11));
        third.grow(39).unwrap();
        drop((second, third));
        assert_eq!(budget.held(), 0);
        let shared = RequestMemory::new(budget.hold(Some("org"), 10).unwrap());
        shared.clone().grow(1_000).unwrap();
        assert_eq!(budget.held(), 1_010);
        drop(shared);
        assert_eq!(budget.held(), 0);
    }
}
