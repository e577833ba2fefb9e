//! Work that must not take the CPU from ingest: the background embedder
//! and the building of semantic search's graphs run on threads at the
//! lowest scheduling priority (the highest nice value), in a thread pool of
//! their own, so that on a small machine a model or a graph build slows
//! down when writers need the cores instead of slowing them down.

/// Lowers the calling thread's priority (best effort: a system that
/// refuses leaves it as it was).
pub fn lower_priority() {
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
