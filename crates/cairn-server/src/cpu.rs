//! A request's CPU work that its size makes long (parsing a large body,
//! preparing large steps, checking a large audit detail, splitting a
//! large thinking text): run on a pool of as many threads as cores, so
//! that it holds none of the HTTP runtime's few worker threads (and every
//! other request on them).
//!
//! Not tokio's blocking pool: its threads are many (up to 512), and glibc
//! gives each thread that allocates under contention a heap of its own,
//! which keeps about a whole parse's memory once freed. A flood of large
//! bodies parsed there held about six times the memory budget in RSS (a
//! review measured 1.65 GB for 221 MiB counted); here the heaps are as many
//! as the cores.

use crate::ApiError;

/// The pool (or, if its threads could not be started, tokio's blocking
/// pool).
pub(crate) struct CpuPool(Option<rayon::ThreadPool>);

impl CpuPool {
    /// A pool of one thread per core.
    pub(crate) fn new() -> CpuPool {
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        CpuPool(
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("cairn-request-cpu-{i}"))
                // A panic ends the work (its caller is answered 500), not
                // the process, which is rayon's default.
                .panic_handler(|_| {})
                .build()
                .ok(),
        )
    }

    /// Runs `work` on the pool if `large` (its input past
    /// [`crate::INLINE_WORK_BYTES`]), else at once on the caller's thread,
    /// where a hop to the pool would cost more than the work.
    pub(crate) async fn run_when<T: Send + 'static>(
        &self,
        large: bool,
        what: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        if large {
            self.run(what, work).await
        } else {
            Ok(work())
        }
    }

    /// Runs `work` on the pool and waits for it. Whatever `work` owns
    /// (a request's memory count with the body it parses) lives until it
    /// ends, even if the caller stops waiting (a client that hangs up).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        what: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (done, answer) = tokio::sync::oneshot::channel();
        let job = move || {
            let _ = done.send(work());
        };
        match &self.0 {
            Some(pool) => pool.spawn(job),
            None => drop(tokio::task::spawn_blocking(job)),
        }
        answer
            .await
            .map_err(|_| crate::worker_failed(&format!("a worker {what} failed")))
    }
}
