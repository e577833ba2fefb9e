//! Getting checkpoints witnessed (`cairn serve --witness URL=VKEY`): a
//! background task that, every interval, brings each org's checkpoint up
//! to date and sends it to every configured witness (C2SP tlog-witness
//! `add-checkpoint`) with a consistency proof from the size that witness
//! last cosigned, verifies each cosignature it gets back against the
//! witness's key, and stores it with the checkpoint. `GET /v1/checkpoint`
//! and exports then carry the cosigned checkpoint.
//!
//! A witness that refuses (`422`: the proof does not verify, `403`, ...) is
//! reported as an error in the log and in `cairn_witness_answers_total`:
//! for a log that was not rewritten it is a misconfiguration, otherwise it
//! is the alarm the witness exists to raise.

use crate::AppState;
use crate::log_api::current_checkpoint;
use axum::body::Bytes;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use cairn_core::checkpoint::verify_cosignature;
use cairn_core::note::NoteVerifier;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Largest witness answer read: a cosignature line or a size is far less.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A witness the server sends its checkpoints to.
#[derive(Debug, Clone)]
pub struct WitnessTarget {
    /// The witness's submission prefix (`http://host:port[/path]`); the
    /// request goes to `<prefix>/add-checkpoint`.
    pub url: String,
    /// The witness's cosignature key (vkey, algorithm `0x04`).
    pub key: NoteVerifier,
}

impl WitnessTarget {
    /// Parses `URL=VKEY` (the form of `--witness`).
    pub fn parse(spec: &str) -> Result<WitnessTarget, String> {
        let (url, vkey) = spec
            .split_once('=')
            .ok_or_else(|| format!("--witness takes URL=VKEY, not {spec:?}"))?;
        if !url.starts_with("http://") {
            return Err(format!(
                "witness URL {url:?} must start with http:// (put a TLS proxy in front of a remote \
                 witness: cosignatures are verified, so the channel needs no trust)"
            ));
        }
        let key = NoteVerifier::parse(vkey).map_err(|e| format!("witness key {vkey:?}: {e}"))?;
        if key.alg() != cairn_core::note::ALG_COSIGNATURE_V1 {
            return Err(format!(
                "witness key {vkey:?} is not a cosignature/v1 key (algorithm 0x04); `cairn witness` prints its key"
            ));
        }
        Ok(WitnessTarget {
            url: url.trim_end_matches('/').to_owned(),
            key,
        })
    }
}

/// What a push achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// A valid cosignature was stored.
    Cosigned,
    /// The witness already had a cosignature of this checkpoint stored.
    AlreadyCosigned,
    /// The witness refused or answered without a valid cosignature.
    Refused(String),
}

/// Sends checkpoints to witnesses.
pub struct Pusher {
    state: Arc<AppState>,
    targets: Vec<WitnessTarget>,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The size each witness last cosigned, per org (learned from its
    /// answers; 0 until then, which a `409` corrects).
    known: tokio::sync::Mutex<HashMap<(usize, String), u64>>,
}

impl Pusher {
    /// A pusher for `targets`.
    pub fn new(state: Arc<AppState>, targets: Vec<WitnessTarget>) -> Pusher {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        Pusher {
            state,
            targets,
            client: Client::builder(TokioExecutor::new()).build(connector),
            known: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Runs forever: one round every `interval`.
    pub async fn run(self, interval: Duration) {
        loop {
            self.round().await;
            tokio::time::sleep(interval).await;
        }
    }

    /// One round: every org's current checkpoint to every witness that has
    /// not cosigned it yet.
    pub async fn round(&self) -> Vec<(String, String, PushOutcome)> {
        let mut outcomes = Vec::new();
        let store = Arc::clone(&self.state.store);
        let orgs = tokio::task::spawn_blocking(move || store.orgs()).await;
        let orgs = match orgs {
            Ok(Ok(orgs)) => orgs,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "witnessing: listing orgs failed");
                return outcomes;
            }
            Err(_) => return outcomes,
        };
        for org in orgs {
            let checkpoint = match current_checkpoint(&self.state, &org).await {
                Ok(cp) => cp,
                // An org with an empty log has nothing to witness.
                Err(_) => continue,
            };
            for index in 0..self.targets.len() {
                let outcome = self.push(index, &org, &checkpoint).await;
                if let PushOutcome::Refused(why) = &outcome {
                    tracing::error!(
                        target: "cairn::witness",
                        witness = %self.targets[index].key.name(),
                        org = %org,
                        size = checkpoint.size,
                        "the witness did not cosign the checkpoint: {why}"
                    );
                }
                if outcome != PushOutcome::AlreadyCosigned {
                    self.state.metrics.witness(outcome == PushOutcome::Cosigned);
                }
                outcomes.push((
                    org.clone(),
                    self.targets[index].key.name().to_owned(),
                    outcome,
                ));
            }
        }
        outcomes
    }

    async fn push(
        &self,
        index: usize,
        org: &str,
        checkpoint: &cairn_store::StoredCheckpoint,
    ) -> PushOutcome {
        let target = &self.targets[index];
        let (store, org_owned, size) = (
            Arc::clone(&self.state.store),
            org.to_owned(),
            checkpoint.size,
        );
        let stored =
            tokio::task::spawn_blocking(move || store.cosignatures(&org_owned, size)).await;
        // Already cosigned only by a line that verifies with the witness's
        // current key (a witness that changed its key is asked again).
        if let Ok(Ok(lines)) = &stored
            && lines.iter().any(|line| {
                verify_cosignature(&format!("{}{line}\n", checkpoint.note), &target.key).is_ok()
            })
        {
            return PushOutcome::AlreadyCosigned;
        }
        let key = (index, org.to_owned());
        let mut old = self.known.lock().await.get(&key).copied().unwrap_or(0);
        // At most: one try, one after a 409 told the witness's size.
        for _ in 0..2 {
            if old > checkpoint.size {
                return PushOutcome::Refused(format!(
                    "the witness cosigned size {old}, beyond this log's {}: the log was rolled back",
                    checkpoint.size
                ));
            }
            let proof = if old == 0 || old == checkpoint.size {
                Vec::new()
            } else {
                let (store, org_owned, new) = (
                    Arc::clone(&self.state.store),
                    org.to_owned(),
                    checkpoint.size,
                );
                match tokio::task::spawn_blocking(move || {
                    store.consistency_proof(&org_owned, old, new)
                })
                .await
                {
                    Ok(Ok(proof)) => proof,
                    Ok(Err(e)) => {
                        return PushOutcome::Refused(format!(
                            "no consistency proof from {old}: {e}"
                        ));
                    }
                    Err(_) => return PushOutcome::Refused("the proof task failed".into()),
                }
            };
            let mut body = format!("old {old}\n");
            for hash in &proof {
                body.push_str(&B64.encode(hash.as_bytes()));
                body.push('\n');
            }
            body.push('\n');
            body.push_str(&checkpoint.note);
            let (status, answer) = match self.post(&target.url, body).await {
                Ok(answer) => answer,
                Err(e) => return PushOutcome::Refused(format!("unreachable: {e}")),
            };
            match status {
                200 => {
                    return self
                        .store_cosignatures(index, org, checkpoint, &answer)
                        .await;
                }
                409 => match answer.trim_end().parse::<u64>() {
                    // A size beyond this checkpoint is not remembered: the
                    // answer is unsigned (a faulty witness, or whatever
                    // answers on a plain-http path, may say anything), and
                    // remembering it would stop every later push to this
                    // witness until a restart. The next round asks again
                    // from the last size known to be sound.
                    Ok(size) if size > checkpoint.size => {
                        return PushOutcome::Refused(format!(
                            "the witness answered that it cosigned size {size}, beyond this log's {}: \
                             the log was rolled back, or the witness (or what answered for it) is wrong",
                            checkpoint.size
                        ));
                    }
                    Ok(size) => {
                        old = size;
                        self.known.lock().await.insert(key.clone(), size);
                    }
                    // C2SP's other 409: a checkpoint of the size the
                    // witness cosigned, with another root.
                    Err(_) => {
                        return PushOutcome::Refused(format!(
                            "409 without a size: the witness cosigned another root at this size \
                             (a fork), or answered wrongly: {:?}",
                            answer.chars().take(200).collect::<String>()
                        ));
                    }
                },
                other => {
                    return PushOutcome::Refused(format!("{other}: {}", answer.trim_end()));
                }
            }
        }
        PushOutcome::Refused("the witness's size kept changing".into())
    }

    async fn store_cosignatures(
        &self,
        index: usize,
        org: &str,
        checkpoint: &cairn_store::StoredCheckpoint,
        answer: &str,
    ) -> PushOutcome {
        let target = &self.targets[index];
        let valid: Vec<String> = answer
            .lines()
            .filter(|line| {
                verify_cosignature(&format!("{}{line}\n", checkpoint.note), &target.key).is_ok()
            })
            .map(str::to_owned)
            .collect();
        let Some(line) = valid.into_iter().next() else {
            return PushOutcome::Refused(format!(
                "200 without a valid cosignature by {}: {:?}",
                target.key,
                answer.chars().take(200).collect::<String>()
            ));
        };
        let (store, org_owned, size, name) = (
            Arc::clone(&self.state.store),
            org.to_owned(),
            checkpoint.size,
            target.key.name().to_owned(),
        );
        match tokio::task::spawn_blocking(move || {
            store.put_cosignature(&org_owned, size, &name, &line)
        })
        .await
        {
            Ok(Ok(())) => {
                self.known
                    .lock()
                    .await
                    .insert((index, org.to_owned()), checkpoint.size);
                PushOutcome::Cosigned
            }
            Ok(Err(e)) => PushOutcome::Refused(format!("storing the cosignature failed: {e}")),
            Err(_) => PushOutcome::Refused("the storing task failed".into()),
        }
    }

    async fn post(&self, url: &str, body: String) -> Result<(u16, String), String> {
        let request = axum::http::Request::post(format!("{url}/add-checkpoint"))
            .header(axum::http::header::CONTENT_TYPE, "text/plain")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(Duration::from_secs(10), self.client.request(request))
            .await
            .map_err(|_| "no answer within 10 s".to_owned())?
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        // Read at most the limit: a hostile witness's endless answer is
        // never held whole.
        let limited = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES);
        let bytes = tokio::time::timeout(Duration::from_secs(10), limited.collect())
            .await
            .map_err(|_| "the answer did not arrive within 10 s".to_owned())?
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    "the answer is over 64 KiB".to_owned()
                } else {
                    e.to_string()
                }
            })?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }
}
