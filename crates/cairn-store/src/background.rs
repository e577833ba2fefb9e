//! Work that must not take the CPU from ingest: the background embedder
//! and the building of semantic search's graphs run on threads the kernel
//! schedules only when nothing else wants the core (Linux `SCHED_IDLE`;
//! elsewhere the lowest priority), in a thread pool of their own, so that
//! on a small machine a model or a graph build waits for writers instead of
//! slowing them down.

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
