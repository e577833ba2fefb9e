//! A request's CPU work that its size makes long (parsing a large body,
//! preparing large steps, checking a large audit detail, splitting a
//! large thinking text, reading and comparing stored steps): run on a
//! pool of as many threads as cores, so that it holds none of the HTTP
//! runtime's few worker threads (and every other request on them).
//!
//! Not tokio's blocking pool: its threads are many (up to 512), and glibc
//! gives each thread that allocates under contention a heap of its own,
//! which keeps about a whole parse's memory once freed. A flood of large
//! bodies parsed there held about six times the memory budget in RSS (a
//! review measured 1.65 GB for 221 MiB counted); here the heaps are as many
//! as the cores.
//!
//! The orgs waiting take turns: each has its own queue, and a free thread
//! takes the next job of the org after the one it last served, so one
//! org's flood of work (large bodies, or batches naming taken trace ids
//! of large steps) delays another org's job by at most one job of each
//! org with work waiting, not by the whole flood. Within an org, jobs run
//! in the order they came.

use crate::ApiError;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

/// A job waiting for a thread.
type Job = Box<dyn FnOnce() + Send>;

/// The pool's threads (or, if they could not be started, tokio's blocking
/// pool) and the jobs waiting for them, by org.
pub(crate) struct CpuPool {
    threads: Option<rayon::ThreadPool>,
    waiting: Arc<Mutex<Waiting>>,
}

/// The jobs waiting, each org's in the order they came, and the orgs
/// with jobs waiting in the order they take their turns.
#[derive(Default)]
struct Waiting {
    turns: VecDeque<String>,
    jobs: HashMap<String, VecDeque<Job>>,
}

impl Waiting {
    /// Queues `job` of `org`; an org with nothing waiting takes the last
    /// turn.
    fn push(&mut self, org: &str, job: Job) {
        match self.jobs.get_mut(org) {
            Some(queue) => queue.push_back(job),
            None => {
                self.jobs.insert(org.to_owned(), VecDeque::from([job]));
                self.turns.push_back(org.to_owned());
            }
        }
    }

    /// The next org's oldest job; that org, if it has more, goes to the
    /// back of the turns.
    fn next(&mut self) -> Option<Job> {
        let org = self.turns.pop_front()?;
        let queue = self.jobs.get_mut(&org)?;
        let job = queue.pop_front();
        if queue.is_empty() {
            self.jobs.remove(&org);
        } else {
            self.turns.push_back(org);
        }
        job
    }
}

impl CpuPool {
    /// A pool of one thread per core.
    pub(crate) fn new() -> CpuPool {
        CpuPool::with_threads(std::thread::available_parallelism().map_or(2, usize::from))
    }

    /// A pool of `threads` threads.
    fn with_threads(threads: usize) -> CpuPool {
        CpuPool {
            threads: rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("cairn-request-cpu-{i}"))
                // A panic ends the work (its caller is answered 500), not
                // the process, which is rayon's default.
                .panic_handler(|_| {})
                .build()
                .ok(),
            waiting: Arc::default(),
        }
    }

    /// Runs `work` of `org` on the pool if `large` (its input past
    /// [`crate::INLINE_WORK_BYTES`]), else at once on the caller's thread,
    /// where a hop to the pool would cost more than the work.
    pub(crate) async fn run_when<T: Send + 'static>(
        &self,
        org: &str,
        large: bool,
        what: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        if large {
            self.run(org, what, work).await
        } else {
            Ok(work())
        }
    }

    /// Runs `work` of `org` on the pool, in its org's turn, and waits for
    /// it. Whatever `work` owns (a request's memory count with the body it
    /// parses) lives until it ends, even if the caller stops waiting (a
    /// client that hangs up). Work whose caller stopped waiting before its
    /// turn came (a client that hung up, a request past its deadline) is
    /// dropped unstarted: nobody would read its answer, and a flood of
    /// abandoned requests would otherwise keep the pool busy long after
    /// they were answered 503.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        org: &str,
        what: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let (done, answer) = tokio::sync::oneshot::channel();
        let job = move || {
            if !done.is_closed() {
                let _ = done.send(work());
            }
        };
        match &self.threads {
            Some(pool) => {
                self.waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(org, Box::new(job));
                // One task per job queued: each runs whichever job's turn
                // it is when a thread takes it, so every job queued is run
                // once.
                let waiting = Arc::clone(&self.waiting);
                pool.spawn(move || {
                    let job = waiting
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .next();
                    if let Some(job) = job {
                        job();
                    }
                });
            }
            // Without the pool's threads, each job is a blocking task of
            // its own: one that is never started (the runtime shutting
            // down) drops its answer and its caller is answered, where a
            // queued job could be left behind.
            None => drop(tokio::task::spawn_blocking(job)),
        }
        answer
            .await
            .map_err(|_| crate::worker_failed(&format!("a worker {what} failed")))
    }
}

#[cfg(test)]
mod tests {
    use super::CpuPool;
    use std::sync::{Arc, Mutex};

    /// The pool's thread held by a job of `org` until `release` is sent
    /// (or dropped): returns it and the job's task, once the job runs.
    async fn hold_the_thread(
        pool: &Arc<CpuPool>,
        org: &'static str,
    ) -> (
        std::sync::mpsc::Sender<()>,
        tokio::task::JoinHandle<Result<(), crate::ApiError>>,
    ) {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, holding) = tokio::sync::oneshot::channel::<()>();
        let pool = Arc::clone(pool);
        let blocker = tokio::spawn(async move {
            pool.run(org, "holding the thread", move || {
                let _ = started.send(());
                let _ = held.recv();
            })
            .await
        });
        holding.await.unwrap();
        (release, blocker)
    }

    /// A flood of one org's jobs queued first delays another org's job by
    /// one of them, not by the flood; each org's jobs keep their order.
    #[tokio::test]
    async fn orgs_take_turns() {
        let pool = Arc::new(CpuPool::with_threads(1));
        let ran = Arc::new(Mutex::new(Vec::new()));
        // The pool's one thread is held until every job below is queued.
        let (release, blocker) = hold_the_thread(&pool, "flood").await;
        let mut answers = Vec::new();
        let queue = |org: &'static str, job: usize| {
            let (pool, ran) = (Arc::clone(&pool), Arc::clone(&ran));
            tokio::spawn(async move {
                pool.run(org, "a job", move || {
                    ran.lock().unwrap().push((org, job));
                })
                .await
            })
        };
        // Spawned tasks queue in their own time: wait until all are.
        let queued = |org: &str| {
            pool.waiting
                .lock()
                .unwrap()
                .jobs
                .get(org)
                .map_or(0, |q| q.len())
        };
        for job in 0..20 {
            answers.push(queue("flood", job));
        }
        while queued("flood") < 20 {
            tokio::task::yield_now().await;
        }
        answers.push(queue("other", 0));
        answers.push(queue("other", 1));
        while queued("other") < 2 {
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        for answer in answers {
            answer.await.unwrap().unwrap();
        }
        let ran = ran.lock().unwrap().clone();
        // The flood's jobs queued while the pool was busy, the other
        // org's after them: the two alternate until the other has none
        // left (it had waited for one of the flood's, not twenty).
        assert_eq!(
            &ran[..5],
            &[
                ("flood", 0),
                ("other", 0),
                ("flood", 1),
                ("other", 1),
                ("flood", 2)
            ]
        );
        let flood: Vec<usize> = ran
            .iter()
            .filter(|(org, _)| *org == "flood")
            .map(|&(_, j)| j)
            .collect();
        assert_eq!(flood, (0..20).collect::<Vec<_>>());
        assert!(pool.waiting.lock().unwrap().jobs.is_empty());
    }

    /// A job whose caller stopped waiting before a thread took it is
    /// not run; the next one is.
    #[tokio::test]
    async fn abandoned_jobs_are_not_run() {
        let pool = Arc::new(CpuPool::with_threads(1));
        let (release, blocker) = hold_the_thread(&pool, "org").await;
        let ran = Arc::new(Mutex::new(Vec::new()));
        let abandoned = {
            let (pool, ran) = (Arc::clone(&pool), Arc::clone(&ran));
            tokio::spawn(async move {
                pool.run("org", "abandoned", move || {
                    ran.lock().unwrap().push("abandoned")
                })
                .await
            })
        };
        while !pool.waiting.lock().unwrap().jobs.contains_key("org") {
            tokio::task::yield_now().await;
        }
        abandoned.abort();
        let _ = abandoned.await;
        let kept = {
            let (pool, ran) = (Arc::clone(&pool), Arc::clone(&ran));
            tokio::spawn(async move {
                pool.run("org", "kept", move || ran.lock().unwrap().push("kept"))
                    .await
            })
        };
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        kept.await.unwrap().unwrap();
        assert_eq!(*ran.lock().unwrap(), ["kept"]);
    }

    /// A job that panics answers its caller with an error, and the pool
    /// goes on.
    #[tokio::test]
    async fn a_panicking_job_fails_only_itself() {
        let pool = CpuPool::with_threads(1);
        let failed = pool
            .run("org", "panicking", || -> usize { panic!("in a job") })
            .await;
        assert_eq!(failed.unwrap_err().code, "internal");
        assert_eq!(pool.run("org", "adding", || 2 + 2).await.unwrap(), 4);
    }
}
