//! What the sequencer, erasures and searches wait for in the full-text
//! index: a backlog relieved, the queue written, a catch-up with the log.

use super::{CATCH_UP_WAIT, STUCK_WAIT, Shared, TICK, lock, poisoned};
use crate::StoreError;
use crate::sqlite::fulltext_queue::Queue;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

impl Shared {
    /// [`super::FullTextIndex::relieve`].
    pub(super) fn relieve(&self) -> Result<bool, StoreError> {
        let mut queue = lock(&self.queue)?;
        if !queue.backlogged() {
            return Ok(false);
        }
        if queue.absorb() {
            // Catching up with the log: what is queued is read again from
            // it, nothing to wait for.
            return Ok(false);
        }
        let deadline = Instant::now() + STUCK_WAIT;
        // Past the limit, a failure from before this call is given one
        // retry (the thread's, a tick later) before the index is stopped.
        let entered = queue.attempts;
        let mut retry_awaited = false;
        loop {
            if !queue.backlogged() || queue.failed.is_some() {
                return Ok(true);
            }
            let over_limit = queue.bytes >= self.limit_bytes;
            if queue.last_write_failed {
                if over_limit && queue.attempts == entered && !retry_awaited {
                    retry_awaited = true;
                    queue = self.await_attempt(queue, entered, 3 * TICK)?;
                    continue;
                }
                if over_limit {
                    let behind = queue.bytes >> 20;
                    queue.fail(format!(
                        "the full-text index could not be written and fell {behind} MB behind; restart the server to mend it"
                    ));
                }
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline && !over_limit {
                return Ok(true);
            }
            let wait = if over_limit { TICK } else { deadline - now };
            let attempts = queue.attempts;
            queue = self.await_attempt(queue, attempts, wait)?;
        }
    }

    /// Waits, for at most `timeout`, for a write of the index to end after
    /// the `since`-th attempt.
    fn await_attempt<'a>(
        &self,
        queue: MutexGuard<'a, Queue>,
        since: u64,
        timeout: Duration,
    ) -> Result<MutexGuard<'a, Queue>, StoreError> {
        let (queue, _) = self
            .progressed
            .wait_timeout_while(queue, timeout, |q| q.attempts == since)
            .map_err(|_| poisoned())?;
        Ok(queue)
    }

    /// Writes, a chunk at a time, everything queued when it was called;
    /// the connection is let go between chunks, so that an erasure or a
    /// sequencer relieving a backlog never waits for more than a chunk.
    pub(super) fn flush(&self) -> Result<(), StoreError> {
        self.flush_org(None)
    }

    /// [`Shared::flush`] before a search of `org` ([`super::FullTextIndex::flush_for`]).
    pub(super) fn flush_org(&self, org: Option<i64>) -> Result<(), StoreError> {
        if self.await_catch_up(org)? {
            return Ok(());
        }
        let target = {
            let queue = lock(&self.queue)?;
            match org {
                // The org's last batch of documents, and every batch before
                // it (they are written in order); nothing of the org
                // queued is nothing to wait for.
                Some(org) => queue.last_of_org.get(&org).copied().unwrap_or(0),
                None => queue.queued,
            }
        };
        loop {
            let conn = self.conn.lock();
            {
                let queue = lock(&self.queue)?;
                if let Some(reason) = &queue.failed {
                    return Err(StoreError::Corrupt(reason.clone()));
                }
                if queue.catching_up.is_some() {
                    // Only a stop ends a catch-up early: nothing queued is
                    // written before it is over.
                    return Err(StoreError::Busy("the full-text index is closing".into()));
                }
                if queue.written >= target {
                    return Ok(());
                }
            }
            self.write_chunk(&conn)?;
            parking_lot::MutexGuard::unlock_fair(conn);
        }
    }

    /// Waits, for at most [`CATCH_UP_WAIT`], for a catch-up with the log
    /// to end (one after a crash is over in moments); a longer one (a
    /// whole index rebuilt) is said to the caller instead. True when the
    /// catch-up goes on and `org`'s documents are all in the index
    /// ([`Queue::complete_while_catching_up`]): its search can go ahead,
    /// with nothing of its own to write.
    fn await_catch_up(&self, org: Option<i64>) -> Result<bool, StoreError> {
        let complete = |q: &Queue| org.is_some_and(|org| q.complete_while_catching_up(org));
        let queue = lock(&self.queue)?;
        let (queue, _) = self
            .progressed
            .wait_timeout_while(queue, CATCH_UP_WAIT, |q| {
                q.catching_up.is_some() && q.failed.is_none() && !q.stop && !complete(q)
            })
            .map_err(|_| poisoned())?;
        match &queue.catching_up {
            Some(_) if queue.failed.is_none() && complete(&queue) => Ok(true),
            Some(catch_up) if queue.failed.is_none() => Err(StoreError::Busy(format!(
                "the full-text index is being brought up to date with the log (about {} steps to go) since the server started; search again shortly",
                catch_up.left_for(org)
            ))),
            _ => Ok(false),
        }
    }
}
