//! Prometheus metrics in the text exposition format. A handful of
//! counters and one histogram, kept with atomics: no registry crate needed.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the append latency histogram, in seconds.
const BUCKETS: [f64; 11] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// The server's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    appends: AtomicU64,
    refusals: AtomicU64,
    latency_buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_micros: AtomicU64,
    verifications_ok: AtomicU64,
    verifications_failed: AtomicU64,
    requests_4xx: AtomicU64,
    requests_5xx: AtomicU64,
    otlp_spans_accepted: AtomicU64,
    otlp_spans_rejected: AtomicU64,
    otlp_items_discarded: AtomicU64,
    witness_cosignatures: AtomicU64,
    witness_refusals: AtomicU64,
}

impl Metrics {
    /// Records an acknowledged append and how long it took.
    pub fn append(&self, took: Duration) {
        self.appends.fetch_add(1, Relaxed);
        let seconds = took.as_secs_f64();
        for (bucket, bound) in self.latency_buckets.iter().zip(BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Relaxed);
        self.latency_sum_micros
            .fetch_add(took.as_micros().min(u128::from(u64::MAX)) as u64, Relaxed);
    }

    /// Records a refused append.
    pub fn refusal(&self) {
        self.refusals.fetch_add(1, Relaxed);
    }

    /// Records a verification and its outcome.
    pub fn verification(&self, verified: bool) {
        if verified {
            self.verifications_ok.fetch_add(1, Relaxed);
        } else {
            self.verifications_failed.fetch_add(1, Relaxed);
        }
    }

    /// Records the spans of an OTLP export: recorded (or already
    /// recorded) and rejected.
    pub fn otlp_spans(&self, accepted: u64, rejected: u64) {
        self.otlp_spans_accepted.fetch_add(accepted, Relaxed);
        self.otlp_spans_rejected.fetch_add(rejected, Relaxed);
    }

    /// Records metric data points or log records answered as rejected
    /// (Cairn records traces only).
    pub fn otlp_discarded(&self, items: u64) {
        self.otlp_items_discarded.fetch_add(items, Relaxed);
    }

    /// Records a witness's answer to a pushed checkpoint: a valid
    /// cosignature stored, or a refusal (or an answer without a valid
    /// cosignature).
    pub fn witness(&self, cosigned: bool) {
        if cosigned {
            self.witness_cosignatures.fetch_add(1, Relaxed);
        } else {
            self.witness_refusals.fetch_add(1, Relaxed);
        }
    }

    /// Records an error answer.
    pub fn error_status(&self, status: u16) {
        if status >= 500 {
            self.requests_5xx.fetch_add(1, Relaxed);
        } else if status >= 400 {
            self.requests_4xx.fetch_add(1, Relaxed);
        }
    }

    /// The exposition text, with the sequencer's batch counters.
    pub fn render(&self, sequencer: &cairn_store::SequencerStats) -> String {
        let batches = sequencer.batches.load(Relaxed);
        let batched_requests = sequencer.requests.load(Relaxed);
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
            );
        };
        counter(
            "cairn_appends_total",
            "Steps acknowledged (durable).",
            self.appends.load(Relaxed),
        );
        counter(
            "cairn_append_refusals_total",
            "Steps refused (invalid, sealed, ...).",
            self.refusals.load(Relaxed),
        );
        counter(
            "cairn_sequencer_batches_total",
            "Transactions committed by the sequencer.",
            batches,
        );
        counter(
            "cairn_sequencer_requests_total",
            "Requests committed by the sequencer (divide by batches for the mean batch size).",
            batched_requests,
        );
        counter(
            "cairn_sequencer_failed_batches_total",
            "Batches, or parts of a batch tried on their own, whose storage write failed (their requests answered with the failure).",
            sequencer.failed_batches.load(Relaxed),
        );
        counter(
            "cairn_sequencer_isolated_batches_total",
            "Batches the database refused over one request's data, tried again in parts (each org's requests, then halves) so that the others' writes go through (each split counts once).",
            sequencer.isolated_batches.load(Relaxed),
        );
        counter(
            "cairn_http_client_errors_total",
            "Answers with a 4xx status.",
            self.requests_4xx.load(Relaxed),
        );
        counter(
            "cairn_http_server_errors_total",
            "Answers with a 5xx status.",
            self.requests_5xx.load(Relaxed),
        );
        counter(
            "cairn_otlp_discarded_items_total",
            "OTLP metric data points and log records answered as rejected (Cairn records traces only).",
            self.otlp_items_discarded.load(Relaxed),
        );
        let _ = write!(
            out,
            "# HELP cairn_otlp_spans_total OTLP spans received, by outcome (accepted: recorded, already recorded, or held to wait for the span naming their session; see cairn_otlp_held_spans_total).\n# TYPE cairn_otlp_spans_total counter\n\
             cairn_otlp_spans_total{{result=\"accepted\"}} {}\ncairn_otlp_spans_total{{result=\"rejected\"}} {}\n",
            self.otlp_spans_accepted.load(Relaxed),
            self.otlp_spans_rejected.load(Relaxed)
        );
        let _ = write!(
            out,
            "# HELP cairn_witness_answers_total Checkpoints pushed to witnesses, by answer (refused: the witness did not cosign; alert on it, a refusal can mean the log was rewritten).\n# TYPE cairn_witness_answers_total counter\n\
             cairn_witness_answers_total{{result=\"cosigned\"}} {}\ncairn_witness_answers_total{{result=\"refused\"}} {}\n",
            self.witness_cosignatures.load(Relaxed),
            self.witness_refusals.load(Relaxed)
        );
        let _ = write!(
            out,
            "# HELP cairn_verifications_total Verifications run, by outcome.\n# TYPE cairn_verifications_total counter\n\
             cairn_verifications_total{{result=\"verified\"}} {}\ncairn_verifications_total{{result=\"failed\"}} {}\n",
            self.verifications_ok.load(Relaxed),
            self.verifications_failed.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP cairn_append_latency_seconds Time from request to durable acknowledgement.\n# TYPE cairn_append_latency_seconds histogram"
        );
        for (bucket, bound) in self.latency_buckets.iter().zip(BUCKETS) {
            let _ = writeln!(
                out,
                "cairn_append_latency_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Relaxed)
            );
        }
        let count = self.latency_count.load(Relaxed);
        let _ = writeln!(
            out,
            "cairn_append_latency_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "cairn_append_latency_seconds_sum {}",
            self.latency_sum_micros.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "cairn_append_latency_seconds_count {count}");
        out
    }
}
