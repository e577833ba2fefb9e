//! The witness surface (`cairn witness`, C2SP tlog-witness): `POST
//! /add-checkpoint` cosigns a checkpoint of a log it knows when the log
//! proves it consistent with the latest one the witness cosigned.
//!
//! The checks are `cairn_core::witness`'s; the state and its atomic
//! check-and-record are `cairn_store::witness_state`'s. Answers follow the
//! specification: `200` with the cosignature line, `400`, `403`, `404`,
//! `409` (body: the witness's size, `text/x.tlog.size`), `422`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cairn_core::checkpoint::Cosigner;
use cairn_core::note::NoteVerifier;
use cairn_core::witness::{WitnessRefusal, check_consistency, check_request};
use cairn_store::witness_state::WitnessState;
use std::collections::HashMap;
use std::sync::Arc;

/// Largest add-checkpoint body: 63 proof lines and a checkpoint with many
/// signatures fit in far less.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A witness: its cosigning key, the logs it knows, its state.
pub struct Witness {
    /// Cosigns accepted checkpoints.
    pub cosigner: Cosigner,
    /// Trusted keys per log origin.
    pub logs: HashMap<String, Vec<NoteVerifier>>,
    /// The latest cosigned checkpoint per origin.
    pub state: WitnessState,
}

/// The witness's routes: `POST /add-checkpoint`, and `GET /` with its
/// cosignature vkey and the origins it witnesses (plain text).
pub fn router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .route("/", get(about))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(witness)
}

async fn about(State(witness): State<Arc<Witness>>) -> Response {
    let mut text = format!(
        "cairn witness {}\nvkey {}\n",
        witness.cosigner.verifier().name(),
        witness.cosigner.verifier()
    );
    let mut origins: Vec<&String> = witness.logs.keys().collect();
    origins.sort();
    for origin in origins {
        text.push_str(&format!("log {origin}\n"));
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

fn now_micros() -> i64 {
    cairn_store::now().as_micros()
}

fn refusal(e: &WitnessRefusal) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    match e {
        WitnessRefusal::Conflict { latest_size } => (
            status,
            [(header::CONTENT_TYPE, "text/x.tlog.size")],
            format!("{latest_size}\n"),
        )
            .into_response(),
        other => (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{other}\n"),
        )
            .into_response(),
    }
}

/// What the witness decided.
enum Outcome {
    /// Accepted and recorded: cosign this note text.
    Cosign(String),
    /// Refused, with the specification's status.
    Refused(WitnessRefusal),
    /// The state could not be read or written.
    Failed,
}

fn decide(witness: &Witness, body: &str) -> Outcome {
    let (request, checkpoint, text) =
        match check_request(body, |origin| witness.logs.get(origin).cloned()) {
            Ok(checked) => checked,
            Err(refused) => return Outcome::Refused(refused),
        };
    let recorded = witness
        .state
        .add(&checkpoint.origin, &request.note, now_micros(), |latest| {
            check_consistency(&request, &checkpoint, latest)
        });
    match recorded {
        Ok(Ok(_)) => Outcome::Cosign(text),
        Ok(Err(refused)) => {
            // A known log's refused checkpoint is evidence: keep it.
            if let Err(e) = witness.state.record_refusal(
                &checkpoint.origin,
                refused.status(),
                &refused.to_string(),
                body,
                now_micros(),
            ) {
                tracing::error!(error = %e, "witness state failure");
            }
            tracing::warn!(
                target: "cairn::witness",
                origin = %checkpoint.origin,
                size = checkpoint.size,
                status = refused.status(),
                "refused to cosign: {refused}"
            );
            Outcome::Refused(refused)
        }
        Err(e) => {
            tracing::error!(error = %e, "witness state failure");
            Outcome::Failed
        }
    }
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, body: Bytes) -> Response {
    let Ok(body) = String::from_utf8(body.to_vec()) else {
        return refusal(&WitnessRefusal::BadRequest("the body is not UTF-8".into()));
    };
    let w = Arc::clone(&witness);
    let outcome = tokio::task::spawn_blocking(move || decide(&w, &body))
        .await
        .unwrap_or(Outcome::Failed);
    match outcome {
        Outcome::Cosign(text) => {
            // Whole seconds since the epoch, never 0 (the spec forbids it).
            let seconds = u64::try_from(cairn_store::now().as_micros() / 1_000_000)
                .unwrap_or(1)
                .max(1);
            let line = witness.cosigner.cosign(&text, seconds);
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], line).into_response()
        }
        Outcome::Refused(refused) => refusal(&refused),
        Outcome::Failed => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "the witness could not read or record its state; try again\n",
        )
            .into_response(),
    }
}
