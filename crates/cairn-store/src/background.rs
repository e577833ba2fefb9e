//! Work that must not take the CPU from ingest: a model run in process by
//! the background embedder, and the building of semantic search's graphs,
//! run on threads the kernel schedules only when nothing else wants the
//! core (Linux `SCHED_IDLE`; elsewhere the lowest priority), in a thread
//! pool of their own, so that on a small machine they wait for writers
//! instead of slowing them down. Only the computation: the embedder's
//! store transactions (which hold the writer's lock, or row locks) run at
//! normal priority, so ingest never waits on a thread that cannot run.

/// Lowers the calling thread's scheduling class (best effort: a system that
/// refuses leaves it as it was).
pub fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
            thread_native_id,
        };
        if set_thread_priority_and_policy(
            thread_native_id(),
            thread_priority::ThreadPriority::Min,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
        )
        .is_ok()
        {
            return;
        }
    }
    let _ = thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min);
}

/// Runs `work` in a pool of low-priority threads (the pool the model's and
/// the graph builder's parallel loops use), from a low-priority thread.
pub fn run_at_low_priority<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    lower_priority();
    match rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("cairn-background-{i}"))
        .start_handler(|_| lower_priority())
        .build()
    {
        Ok(pool) => pool.install(work),
        Err(_) => work(),
    }
}

/// An embedder whose work runs in a low-priority pool (the caller's thread
/// waits for it at its own priority).
pub struct LowPriorityEmbedder {
    inner: std::sync::Arc<dyn crate::embed::Embedder>,
    pool: Option<rayon::ThreadPool>,
}

impl std::fmt::Debug for LowPriorityEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LowPriorityEmbedder")
            .field(&self.inner)
            .finish()
    }
}

impl LowPriorityEmbedder {
    /// `inner`, run at low priority.
    pub fn new(inner: std::sync::Arc<dyn crate::embed::Embedder>) -> LowPriorityEmbedder {
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("cairn-embed-{i}"))
            .start_handler(|_| lower_priority())
            .build()
            .ok();
        LowPriorityEmbedder { inner, pool }
    }
}

impl crate::embed::Embedder for LowPriorityEmbedder {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::embed::EmbedError> {
        match &self.pool {
            Some(pool) => pool.install(|| self.inner.embed(texts)),
            None => self.inner.embed(texts),
        }
    }

    fn in_process(&self) -> bool {
        self.inner.in_process()
    }
}
