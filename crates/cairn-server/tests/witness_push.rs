//! Sending checkpoints to a witness that answers badly (a faulty witness,
//! or whatever answers on a plain-http path): one unsigned `409` naming a
//! size beyond the log's is reported, not believed for good, so the next
//! round is cosigned; an answer longer than the limit is refused without
//! being held whole.

#![allow(clippy::unwrap_used)]

mod common;
use axum::body::Body;
use axum::response::IntoResponse as _;
use cairn_server::witness::Witness;
use cairn_server::witness_push::{PushOutcome, Pusher, WitnessTarget};
use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::ServiceExt as _;

/// A server with one step recorded in org `acme`, and its state.
fn server_with_a_step() -> (Server, Arc<AppState>) {
    let (server, state) = start_with_state(ServerConfig::default());
    let reply = post(
        &server,
        "/v1/steps",
        &server.admin,
        &step("s", "a", "plan", "go"),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    (server, state)
}

/// A real witness of `server`'s org `acme`, in `dir`.
fn real_witness(server: &Server, dir: &std::path::Path) -> Arc<Witness> {
    let (name, _) = server.store.log_signer("acme").unwrap();
    let keys = server.store.log_keys("acme").unwrap();
    let mut logs = std::collections::HashMap::new();
    logs.insert(cairn_core::log::log_origin(&name, "acme"), keys);
    Arc::new(Witness {
        cosigner: cairn_core::checkpoint::Cosigner::from_seed("w.example", &[7; 32]).unwrap(),
        logs,
        state: cairn_store::witness_state::WitnessState::open(dir).unwrap(),
    })
}

/// `.0` chunks of 64 KiB, each made when asked for.
struct Endless(usize);

impl futures_core::Stream for Endless {
    type Item = Result<axum::body::Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.0 == 0 {
            return std::task::Poll::Ready(None);
        }
        self.0 -= 1;
        std::task::Poll::Ready(Some(Ok(axum::body::Bytes::from(vec![b'x'; 65_536]))))
    }
}

/// Serves `app` on a loopback port from the current runtime.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[test]
fn a_lying_409_is_reported_once_and_the_next_round_is_cosigned() {
    let (server, state) = server_with_a_step();
    let dir = tempfile::tempdir().unwrap();
    let witness = real_witness(&server, dir.path());
    let key = witness.cosigner.verifier();
    let real = cairn_server::witness::router(witness, &Limits::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    // The first answer claims a size far beyond the log's; later requests
    // reach the real witness.
    let fake = axum::Router::new().fallback(move |request: axum::extract::Request<Body>| {
        let (real, calls) = (real.clone(), Arc::clone(&counted));
        async move {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                return (
                    axum::http::StatusCode::CONFLICT,
                    [("content-type", "text/x.tlog.size")],
                    "9223372036854775807\n",
                )
                    .into_response();
            }
            real.oneshot(request).await.unwrap()
        }
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let url = serve(fake).await;
        let pusher = Pusher::new(
            Arc::clone(&state),
            vec![WitnessTarget::parse(&format!("{url}={key}")).unwrap()],
        );
        let first = pusher.round().await;
        assert!(
            matches!(&first[..], [(_, _, PushOutcome::Refused(why))] if why.contains("beyond this log's")),
            "{first:?}"
        );
        let second = pusher.round().await;
        assert_eq!(
            second
                .iter()
                .map(|(_, _, o)| o.clone())
                .collect::<Vec<_>>(),
            vec![PushOutcome::Cosigned],
            "the lie was not remembered"
        );
    });
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn an_endless_answer_is_refused_not_held() {
    let (server, state) = server_with_a_step();
    let dir = tempfile::tempdir().unwrap();
    let key = real_witness(&server, dir.path()).cosigner.verifier();
    // An answer without end, made as it is read: a pusher that reads it
    // whole before checking its size would answer only after its 10 s
    // timeout, having held what arrived by then.
    let fake = axum::Router::new()
        .fallback(|| async { Body::from_stream(Endless(usize::MAX)).into_response() });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let url = serve(fake).await;
        let pusher = Pusher::new(
            Arc::clone(&state),
            vec![WitnessTarget::parse(&format!("{url}={key}")).unwrap()],
        );
        let outcome = pusher.round().await;
        assert!(
            matches!(&outcome[..], [(_, _, PushOutcome::Refused(why))] if why.contains("over 64 KiB")),
            "{outcome:?}"
        );
    });
}
