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
/// cosignature vkey and the origins it witnesses (plain text), with the
/// API's body and handler timeouts (`limits`): a client that sends a
/// body's length and then nothing gets `408` instead of holding one of
/// the listener's connections for good.
pub fn router(witness: Arc<Witness>, limits: &crate::Limits) -> Router {
    let routes = Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .route("/", get(about))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES));
    crate::limits::timed(routes, limits)
        .layer(axum::middleware::map_response(plain_answers))
        .with_state(witness)
}

/// Every answer of the witness as every answer of the API: never taken
/// by a browser for another type than it says, never cached (a
/// cosignature or a refusal is of its moment).
async fn plain_answers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        axum::http::HeaderValue::from_static("nosniff"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(axum::http::HeaderValue::from_static("no-store"));
    response
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
    /// Accepted and recorded: cosign this note text with this timestamp
    /// (taken while the state was held, so it is the time of the view the
    /// cosignature speaks of).
    Cosign(String, u64),
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
    let mut seconds = 1;
    let recorded = witness
        .state
        .add(&checkpoint.origin, &request.note, now_micros(), |latest| {
            // Whole seconds since the epoch, never 0 (the spec forbids it).
            seconds = u64::try_from(cairn_store::now().as_micros() / 1_000_000)
                .unwrap_or(1)
                .max(1);
            check_consistency(&request, &checkpoint, latest)
        });
    match recorded {
        Ok(Ok(_)) => Outcome::Cosign(text, seconds),
        Ok(Err(refused)) => {
            // A known log's inconsistent checkpoint may be evidence: keep
            // what the log signed. Not a stale old size (the log's view of
            // the witness is only out of date), nor the cosigned checkpoint
            // itself sent with a proof (nothing the log signed disagrees).
            let evidential = !matches!(
                refused,
                WitnessRefusal::Conflict { .. } | WitnessRefusal::ProofNotEmpty
            );
            if evidential
                && let Err(e) = witness.state.record_refusal(
                    &checkpoint.origin,
                    refused.status(),
                    &refused.to_string(),
                    &text,
                    &evidence(&request, &text, witness.logs.get(&checkpoint.origin)),
                    now_micros(),
                )
            {
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

/// What a refused request proves: its old size and proof, and the
/// checkpoint with only the signature lines of the log's trusted keys.
fn evidence(
    request: &cairn_core::witness::AddCheckpoint,
    text: &str,
    keys: Option<&Vec<NoteVerifier>>,
) -> String {
    use base64::Engine as _;
    let mut out = format!("old {}\n", request.old_size);
    for hash in &request.proof {
        out.push_str(&base64::engine::general_purpose::STANDARD.encode(hash.as_bytes()));
        out.push('\n');
    }
    out.push('\n');
    out.push_str(text);
    out.push('\n');
    if let Ok(note) = cairn_core::note::Note::parse(&request.note) {
        for sig in &note.signatures {
            let trusted = keys.is_some_and(|keys| {
                keys.iter()
                    .any(|k| k.name() == sig.name && k.key_id() == sig.key_id)
            });
            if trusted {
                let mut blob = sig.key_id.to_be_bytes().to_vec();
                blob.extend_from_slice(&sig.signature);
                out.push_str(&format!(
                    "\u{2014} {} {}\n",
                    sig.name,
                    base64::engine::general_purpose::STANDARD.encode(blob)
                ));
            }
        }
    }
    out
}

async fn add_checkpoint(
    State(witness): State<Arc<Witness>>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    // A body too slow is a 408 and one too large a 413, as on the API's
    // routes (axum would answer a slow body with a 400); the witness
    // answers in plain text.
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let e = crate::limits::body_error(&rejection, MAX_REQUEST_BYTES);
            let message = match e.status {
                StatusCode::REQUEST_TIMEOUT => "the request body arrived too slowly".to_owned(),
                StatusCode::PAYLOAD_TOO_LARGE => {
                    format!("the request body is over {MAX_REQUEST_BYTES} bytes")
                }
                _ => e.message,
            };
            return (
                e.status,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!("{message}\n"),
            )
                .into_response();
        }
    };
    let Ok(body) = String::from_utf8(body.to_vec()) else {
        return refusal(&WitnessRefusal::BadRequest("the body is not UTF-8".into()));
    };
    let w = Arc::clone(&witness);
    let outcome = tokio::task::spawn_blocking(move || decide(&w, &body))
        .await
        .unwrap_or(Outcome::Failed);
    match outcome {
        Outcome::Cosign(text, seconds) => {
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
