//! The org log over HTTP: the signed checkpoint, inclusion and consistency
//! proofs, streamed exports (bundles) and the streamed verification of an
//! uploaded bundle.

use super::*;
use crate::input::StrictQuery;

/// The latest checkpoint, signing a new one first if the log grew.
pub(crate) async fn current_checkpoint(
    state: &Arc<AppState>,
    org: &str,
) -> Result<cairn_store::StoredCheckpoint, ApiError> {
    let org_owned = org.to_owned();
    let size = blocking(state, move |store| Ok(store.log_size(&org_owned)?)).await?;
    if size == 0 {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this org's log is empty: nothing has been recorded yet, so there is no \
             checkpoint, proof or export; record a step first",
        ));
    }
    match state
        .ledger
        .submit(WriteRequest::Checkpoint {
            org_id: org.to_owned(),
        })
        .await?
    {
        Written::Checkpoint(cp) => Ok(cp),
        other => Err(crate::unexpected(other)),
    }
}

#[utoipa::path(
    get,
    path = "/v1/checkpoint",
    operation_id = "checkpoint",
    tag = "checkpoint",
    summary = "The latest signed checkpoint",
    description = "C2SP tlog-checkpoint as a signed note; signs a new one first if the log grew. With witnesses configured (cairn serve --witness), the note carries the cosignature lines (C2SP cosignature/v1) the witnesses returned for it so far.",
    responses(
        (status = 200, description = "OK", content_type = "text/plain", body = String),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn checkpoint(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let cp = current_checkpoint(&state, caller.org()).await?;
    let note = cosigned(&state, caller.org(), cp).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], note).into_response())
}

/// A checkpoint's note with the witnesses' cosignature lines stored for it
/// (none until the witnesses answered).
pub(crate) async fn cosigned(
    state: &Arc<AppState>,
    org: &str,
    cp: cairn_store::StoredCheckpoint,
) -> Result<String, ApiError> {
    let org = org.to_owned();
    blocking(state, move |store| {
        let mut note = cp.note;
        for line in store.cosignatures(&org, cp.size)? {
            note.push_str(&line);
            note.push('\n');
        }
        Ok(note)
    })
    .await
}

#[utoipa::path(
    get,
    path = "/v1/proofs/inclusion",
    operation_id = "inclusion_proof",
    tag = "proofs",
    summary = "Inclusion proof",
    params(
        ("seq" = u64, Query, description = "Entry", minimum = 0),
        ("size" = Option<u64>, Query, description = "Tree size, default the latest checkpoint's", minimum = 1),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn inclusion_proof(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    StrictQuery(q): StrictQuery,
) -> Result<Json, ApiError> {
    input::refuse_unknown_params(q.keys(), &["seq", "size"])?;
    let seq = query_u64(&q, "seq")?.ok_or_else(|| input::missing_field("seq"))?;
    let size = query_u64(&q, "size")?;
    let proof = inclusion_proof_of(&state, caller.org(), seq, size).await?;
    Ok(axum::Json(crate::wire::to_json(&proof)))
}

/// An inclusion proof of entry `seq` in the org log at `size` (default:
/// the latest checkpoint's), with that checkpoint's note when the size is
/// its: the one operation behind `GET /v1/proofs/inclusion` and MCP
/// `get_inclusion_proof`. A size of 0 or past the log is `invalid_argument`
/// naming `size`; an entry the log does not hold `not_found`; an entry at
/// or past `size` `invalid_argument` naming `seq`.
pub(crate) async fn inclusion_proof_of(
    state: &Arc<AppState>,
    org: &str,
    seq: u64,
    size: Option<u64>,
) -> Result<crate::mcp::InclusionProof, ApiError> {
    let cp = current_checkpoint(state, org).await?;
    let size = size.unwrap_or(cp.size);
    let org = org.to_owned();
    let (leaf, proof, root) = blocking(state, move |store| {
        let log_size = store.log_size(&org)?;
        if size == 0 || size > log_size {
            return Err(ApiError::bad_request(
                "invalid_argument",
                format!("size must be 1 to the log's size ({log_size}), not {size}"),
            )
            .with_field("size"));
        }
        if seq >= log_size {
            return Err(ApiError::not_found_because(format!(
                "entry {seq} is not in the log ({log_size} entries)"
            )));
        }
        if seq >= size {
            return Err(ApiError::bad_request(
                "invalid_argument",
                format!(
                    "entry {seq} is not in the log's first {size} entries: give a size above {seq}"
                ),
            )
            .with_field("seq"));
        }
        let mut leaf = None;
        store.read_log(&org, seq, seq + 1, &mut |stored| {
            leaf = Some(stored.leaf);
            false
        })?;
        let proof = store.inclusion_proof(&org, seq, size)?;
        let root = store.root_at(&org, size)?;
        Ok((leaf, proof, root))
    })
    .await?;
    Ok(crate::mcp::InclusionProof {
        seq,
        size,
        leaf_hash: leaf.map(|l| l.to_hex()),
        proof: proof.iter().map(Hash::to_hex).collect(),
        root: root.to_hex(),
        checkpoint: (size == cp.size).then_some(cp.note),
    })
}

#[utoipa::path(
    get,
    path = "/v1/proofs/consistency",
    operation_id = "consistency_proof",
    tag = "proofs",
    summary = "Consistency proof",
    params(
        ("old" = u64, Query, description = "Old size", minimum = 1),
        ("new" = Option<u64>, Query, description = "New size, default the latest checkpoint's", minimum = 1),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn consistency_proof(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    StrictQuery(q): StrictQuery,
) -> Result<Json, ApiError> {
    input::refuse_unknown_params(q.keys(), &["old", "new"])?;
    let old = query_u64(&q, "old")?.ok_or_else(|| input::missing_field("old"))?;
    let cp = current_checkpoint(&state, caller.org()).await?;
    let new = query_u64(&q, "new")?.unwrap_or(cp.size);
    if old == 0 || old > new {
        return Err(ApiError::bad_request(
            "invalid_argument",
            format!("old must be 1 to new ({new}), not {old}"),
        )
        .with_field("old"));
    }
    let org = caller.org().to_owned();
    let (proof, old_root, new_root) = blocking(&state, move |store| {
        if new > store.log_size(&org)? {
            return Err(ApiError::not_found(format!("a log of size {new}")));
        }
        Ok((
            store.consistency_proof(&org, old, new)?,
            store.root_at(&org, old)?,
            store.root_at(&org, new)?,
        ))
    })
    .await?;
    Ok(axum::Json(json!({
        "old_size": old, "new_size": new, "old_root": old_root.to_hex(), "new_root": new_root.to_hex(),
        "proof": proof.iter().map(Hash::to_hex).collect::<Vec<_>>(),
    })))
}

/// The API error of a receipt that could not be made.
fn receipt_error(e: cairn_store::ops::ReceiptOpError) -> ApiError {
    use cairn_store::ops::ReceiptOpError;
    match e {
        ReceiptOpError::Store(e) => e.into(),
        ReceiptOpError::OutOfRange(m) => ApiError::not_found_because(m),
        ReceiptOpError::Invalid { field, message } => {
            ApiError::bad_request("invalid_argument", message).with_field(field)
        }
        e @ ReceiptOpError::ForeignLog => {
            ApiError::new(StatusCode::CONFLICT, "read_only_org", e.to_string())
        }
        e => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    }
}

/// The receipt's bytes as `application/cose`, or as
/// `application/scitt-receipt+cose` when the client's Accept names that.
fn receipt_response(headers: &HeaderMap, receipt: Vec<u8>) -> Response {
    use cairn_core::receipt::{MEDIA_TYPE_COSE, MEDIA_TYPE_SCITT_RECEIPT};
    let scitt = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            range
                .split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case(MEDIA_TYPE_SCITT_RECEIPT))
        });
    let media_type = if scitt {
        MEDIA_TYPE_SCITT_RECEIPT
    } else {
        MEDIA_TYPE_COSE
    };
    ([(header::CONTENT_TYPE, media_type)], receipt).into_response()
}

#[utoipa::path(
    get,
    path = "/v1/receipts/inclusion",
    operation_id = "inclusion_receipt",
    tag = "proofs",
    summary = "Inclusion receipt (COSE, RFC 9942)",
    description = "A COSE Receipt of inclusion (RFC 9942, RFC9162_SHA256 profile) of the entry at seq in the org log's tree of size entries: a tagged COSE_Sign1 signed with the server key (EdDSA), the inclusion proof in the unprotected header (vdp 396, key -1), the payload detached: it is the tree's root, which a verifier recomputes from the entry's leaf hash and the proof. Answered as application/scitt-receipt+cose when Accept asks for it, else application/cose. FORMAT.md, COSE receipts.",
    params(
        ("seq" = u64, Query, description = "Entry (its position in the org log)", minimum = 0),
        ("size" = Option<u64>, Query, description = "Tree size, at most the latest checkpoint's (the default)", minimum = 1),
    ),
    responses(
        (status = 200, description = "The receipt (CBOR)", content((crate::api_doc::Cose = "application/cose"), (crate::api_doc::Cose = "application/scitt-receipt+cose"))),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn inclusion_receipt(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    input::refuse_unknown_params(q.keys(), &["seq", "size"])?;
    let seq = query_u64(&q, "seq")?.ok_or_else(|| input::missing_field("seq"))?;
    let size = query_u64(&q, "size")?;
    let cp = current_checkpoint(&state, caller.org()).await?;
    let org = caller.org().to_owned();
    let receipt = blocking(&state, move |store| {
        cairn_store::ops::Receipts::new(store, &org, &cp)
            .and_then(|r| r.inclusion(seq, size))
            .map_err(receipt_error)
    })
    .await?;
    Ok(receipt_response(&headers, receipt))
}

#[utoipa::path(
    get,
    path = "/v1/receipts/consistency",
    operation_id = "consistency_receipt",
    tag = "proofs",
    summary = "Consistency receipt (COSE, RFC 9942)",
    description = "A COSE Receipt of consistency (RFC 9942, RFC9162_SHA256 profile) from the org log's tree of old entries to its tree of new entries: the consistency proof in the unprotected header (vdp 396, key -2), signed over the newer tree's root (detached payload), which a verifier recomputes from the older root it holds and the proof. Answered as application/scitt-receipt+cose when Accept asks for it, else application/cose. FORMAT.md, COSE receipts.",
    params(
        ("old" = u64, Query, description = "Old size, below new", minimum = 1),
        ("new" = Option<u64>, Query, description = "New size, at most the latest checkpoint's (the default)", minimum = 2),
    ),
    responses(
        (status = 200, description = "The receipt (CBOR)", content((crate::api_doc::Cose = "application/cose"), (crate::api_doc::Cose = "application/scitt-receipt+cose"))),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn consistency_receipt(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    input::refuse_unknown_params(q.keys(), &["old", "new"])?;
    let old = query_u64(&q, "old")?.ok_or_else(|| input::missing_field("old"))?;
    let new = query_u64(&q, "new")?;
    let cp = current_checkpoint(&state, caller.org()).await?;
    let org = caller.org().to_owned();
    let receipt = blocking(&state, move |store| {
        cairn_store::ops::Receipts::new(store, &org, &cp)
            .and_then(|r| r.consistency(old, new))
            .map_err(receipt_error)
    })
    .await?;
    Ok(receipt_response(&headers, receipt))
}

/// Sends written bytes to the response body as they come.
pub(crate) struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buffer: Vec<u8>,
}

impl ChannelWriter {
    /// A writer into `tx`, sending chunks of about 64 KiB.
    pub(crate) fn new(tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) -> Self {
        ChannelWriter {
            tx,
            buffer: Vec::new(),
        }
    }
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= 64 * 1024 {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buffer));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

pub(crate) struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl ChannelBody {
    /// A body streaming what `rx` receives.
    pub(crate) fn new(rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Self {
        ChannelBody(rx)
    }
}

impl futures_core::Stream for ChannelBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[utoipa::path(
    get,
    path = "/v1/export",
    operation_id = "export",
    tag = "export",
    summary = "Export a bundle (streamed JSON Lines)",
    description = "Exactly one of session, agent, since+until, all=true. FORMAT.md section 10. Roles: auditor, admin; without level an export shows every field, which for an auditor is level=full (each session's consent required: 403 consent_required) and for all=true an admin's alone. A scope that matches no session is a 404 before any byte of the bundle. A partial bundle whose signed selection (every selected session and listed record) would be a line longer than 16 MiB, which verifiers do not read by default, is a 422 export_too_large before any byte: export a narrower scope, a lower level, or the whole log.",
    params(
        ("session" = Option<crate::api_doc::Id>, Query, description = "One session"),
        ("agent" = Option<crate::api_doc::Id>, Query, description = "Every session of an agent"),
        ("since" = Option<String>, Query, description = "Sessions started at or after: RFC 3339 or a date (its start), with until"),
        ("until" = Option<String>, Query, description = "Sessions started before: RFC 3339 or a date (that day included), with since"),
        ("all" = Option<bool>, Query, description = "true for the whole org log"),
        ("level" = Option<crate::api_doc::Level>, Query, description = "Seed 004's detail level: generic (kinds, numbers, timings, hashes), detailed (plus identifiers, tool names, models, lists) or full (plus content: needs the session's recorded consent and an auditor or admin key). Hidden fields are replaced by their commitments and listed in hidden_fields; everything still verifies."),
        ("since_size" = Option<u64>, Query, description = "Add a consistency line from this earlier log size (one the holder trusts) to the bundle's checkpoint.", minimum = 1),
    ),
    responses(
        (status = 200, description = "OK", content_type = "application/x-ndjson", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn export(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    StrictQuery(q): StrictQuery,
) -> Result<Response, ApiError> {
    input::refuse_unknown_params(
        q.keys(),
        &[
            "session",
            "agent",
            "since",
            "until",
            "all",
            "since_size",
            "level",
        ],
    )?;
    caller.require(caller.key.role.can_export(), "export bundles")?;
    let session = query_id(&q, "session")?;
    let agent = query_id(&q, "agent")?;
    let scope = match (
        session.as_ref(),
        agent.as_ref(),
        q.get("since"),
        q.get("until"),
        query_bool(&q, "all")?,
    ) {
        (Some(s), None, None, None, false) => ExportScope::Session(s.clone()),
        (None, Some(a), None, None, false) => ExportScope::Agent(a.clone()),
        (None, None, Some(since), Some(until), false) => {
            crate::sessions::export_range(since, until)?
        }
        (None, None, None, None, true) => ExportScope::All,
        (None, None, Some(_), None, false) | (None, None, None, Some(_), false) => {
            let missing = if q.contains_key("since") {
                "until"
            } else {
                "since"
            };
            return Err(ApiError::bad_request(
                "missing_field",
                format!("a time-range export takes since and until together: give {missing} too"),
            )
            .with_field(missing));
        }
        _ => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "give exactly one of session, agent, since and until, or all",
            ));
        }
    };
    let asked = level_param(&q)?;
    // The whole log is the org's own record, every field of every
    // session: an admin's to export.
    if scope == ExportScope::All && asked.is_none() {
        caller.require(
            crate::exports_own_record(&caller),
            "export the whole log (all=true shows every field of every session: admin keys not bound to an agent; an auditor exports a session, an agent or a time range at a level)",
        )?;
    }
    let level = crate::export_level(&caller, asked);
    allow_level(&caller, level, None)?;
    let options = cairn_store::ops::ExportOptions {
        level,
        since_size: query_u64(&q, "since_size")?,
    };
    // Everything is decided before the status line, so that an empty or a
    // refused export is a 4xx, not a truncated body.
    let permit = Arc::new(limits::expensive(&state, caller.org(), "the export").await?);
    let plan = plan_export(&state, &caller, scope, options, &permit).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let store = Arc::clone(&state.store);
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut out = ChannelWriter {
            tx: tx.clone(),
            buffer: Vec::new(),
        };
        if let Err(e) = cairn_store::ops::write_export(store.as_ref(), &plan, &mut out, &mut |_| {})
        {
            // The body is cut short; a verifier reports the missing end
            // line as `missing-record`.
            tracing::warn!(error = %e, "export failed");
            let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(ChannelBody(rx)),
    )
        .into_response())
}

/// Plans an export of the caller's org against a fresh checkpoint (HTTP and
/// MCP): the selection of a partial bundle is computed and signed, the
/// consistency proof asked for made. A step erased between the checkpoint
/// and the plan makes it sign a newer checkpoint and plan again. Each
/// planning task holds `slot` (the export's): a blocking task that started
/// runs to its end even if the client goes away (one not yet started is
/// dropped, `blocking`), and must not run outside its slot.
pub(crate) async fn plan_export(
    state: &Arc<AppState>,
    caller: &Caller,
    scope: ExportScope,
    options: cairn_store::ops::ExportOptions,
    slot: &Arc<crate::limits::ExpensiveSlot>,
) -> Result<cairn_store::ops::ExportPlan, ApiError> {
    use cairn_store::ops::ExportError;
    let mut attempts = 0;
    loop {
        let cp = current_checkpoint(state, caller.org()).await?;
        let (org, scope_now, slot) = (caller.org().to_owned(), scope.clone(), Arc::clone(slot));
        // A selection line every verifier reads by default, and this
        // server's own (CAIRN_MAX_BUNDLE_LINE_BYTES) if set lower.
        let max_line = state
            .config
            .limits
            .max_bundle_line_bytes
            .min(cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES);
        let planned = blocking(state, move |store| {
            let _slot = slot;
            Ok(cairn_store::ops::plan_export_within(
                store,
                &org,
                &scope_now,
                options,
                &cp,
                cairn_store::now(),
                max_line,
            ))
        })
        .await?;
        match planned {
            Ok(plan) => return Ok(plan),
            Err(ExportError::Stale { .. }) if attempts < 3 => attempts += 1,
            Err(ExportError::Empty(m)) => return Err(ApiError::not_found_because(m)),
            Err(ExportError::Consent(session)) => return Err(consent_required(&session)),
            Err(ExportError::Store(e)) => return Err(e.into()),
            Err(e @ ExportError::TooLarge(_)) => {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "export_too_large",
                    e.to_string(),
                ));
            }
            Err(e) => return Err(ApiError::bad_request("invalid_request", e.to_string())),
        }
    }
}

/// Most log keys one bundle verification may pin (`key=`): a log has a
/// handful, and each is decoded before the work starts.
const MAX_PINNED_KEYS: usize = 64;

/// Trusted checkpoints given with a verification: each `checkpoint`
/// parameter is a signed checkpoint note, in base64 (standard or URL-safe).
pub(crate) fn trusted_param(q: &[(String, String)]) -> Result<Vec<String>, ApiError> {
    use base64::Engine as _;
    q.iter()
        .filter(|(k, _)| k == "checkpoint")
        .map(|(_, v)| {
            let refused = |why: String| {
                ApiError::bad_request(
                    "invalid_checkpoint",
                    format!("checkpoint must be a signed checkpoint note in base64: {why}"),
                )
                .with_field("checkpoint")
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v)
                .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(v))
                .map_err(|_| refused("this is not base64".into()))?;
            let note = String::from_utf8(bytes)
                .map_err(|_| refused("this decodes to bytes that are not text".into()))?;
            // Not a signed note at all is the caller's mistake (400), as a
            // store's verification answers; a note signed by another key,
            // or of another text, stays a bundle's verdict.
            cairn_core::checkpoint::checkpoint_note_shape(&note)
                .map_err(|e| refused(format!("this decodes to no signed note ({e})")))?;
            Ok(note)
        })
        .collect()
}

/// A witness policy given with a verification: `witness` parameters (each
/// a cosignature vkey, repeatable) and `quorum` (default: all of them).
pub(crate) fn witness_policy_param(
    q: &[(String, String)],
) -> Result<Option<cairn_core::witness::WitnessPolicy>, ApiError> {
    // Counted before any key is decoded: each is a curve point to
    // decompress.
    let given = q.iter().filter(|(k, _)| k == "witness").count();
    if given > cairn_core::witness::MAX_WITNESSES {
        return Err(ApiError::bad_request(
            "invalid_argument",
            format!(
                "at most {} witness parameters, not {given}",
                cairn_core::witness::MAX_WITNESSES
            ),
        )
        .with_field("witness"));
    }
    let keys = q
        .iter()
        .filter(|(k, _)| k == "witness")
        .map(|(_, v)| {
            query_vkey(v).map_err(|e| {
                ApiError::bad_request("invalid_argument", format!("witness must be a vkey: {e}"))
                    .with_field("witness")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // One quorum: two would leave which one counts to the reader (a proxy
    // and the server could differ on a security policy).
    if q.iter().filter(|(k, _)| k == "quorum").count() > 1 {
        return Err(ApiError::bad_request(
            "invalid_request",
            "query parameter \"quorum\" is given twice: give it once",
        )
        .with_field("quorum"));
    }
    let quorum = match q.iter().find(|(k, _)| k == "quorum") {
        Some((_, v)) => Some(crate::decimal::<usize>(v).ok_or_else(|| {
            ApiError::bad_request("invalid_argument", "quorum must be a positive integer")
                .with_field("quorum")
        })?),
        None => None,
    };
    if keys.is_empty() {
        return match quorum {
            Some(_) => Err(ApiError::bad_request(
                "invalid_argument",
                "quorum needs at least one witness parameter",
            )
            .with_field("quorum")),
            None => Ok(None),
        };
    }
    let quorum_given = quorum.is_some();
    let quorum = quorum.unwrap_or(keys.len());
    if quorum_given && (quorum == 0 || quorum > keys.len()) {
        return Err(ApiError::bad_request(
            "invalid_argument",
            format!(
                "quorum must be 1 to {} (the number of witness parameters), not {quorum}",
                keys.len()
            ),
        )
        .with_field("quorum"));
    }
    cairn_core::witness::WitnessPolicy::new(keys, quorum)
        .map(Some)
        .map_err(|e| ApiError::bad_request("invalid_argument", e).with_field("witness"))
}

/// A vkey from a query string. A `+` there is read as a space (HTML
/// forms' encoding), and a vkey is `name+id+key` with base64 that may hold
/// `+` too: a key that fails with a space in it is told so.
fn query_vkey(text: &str) -> Result<cairn_core::note::NoteVerifier, String> {
    cairn_core::note::NoteVerifier::parse(text).map_err(|e| {
        if text.contains(' ') {
            format!(
                "{e} (it holds a space: in a query string a `+` reads as a space, so send the vkey's `+` as %2B, e.g. curl -G --data-urlencode \"witness=...\")"
            )
        } else {
            e.to_string()
        }
    })
}

/// `POST /v1/bundles/verify`: the body is streamed into the verifier line
/// by line, so memory stays at one line (at most
/// [`Limits::max_bundle_line_bytes`]) whatever the bundle's size; a bundle
/// that fails is not read past its failing line.
#[utoipa::path(
    post,
    path = "/v1/bundles/verify",
    operation_id = "verify_bundle",
    tag = "bundles",
    summary = "Verify an uploaded bundle",
    description = "Verifies against the keys given with `key`, else against the key named in the bundle (`key_pinned` says which). `server_key` is the key whose signature on the bundle's checkpoint verified (not merely the first the header names), and `signed_by_this_server` says whether a key that signed it is this server's (its current key, or one its log for the caller's org was signed with): a bundle that verifies with it false is authentic under another server's key, which this server does not vouch for; compare `server_key` with that operator's published key. A bundle that does not verify has it false whoever signed it: a tampered bundle is vouched for by no one (`verified` and `brokenReason` say why). With `witness` parameters, `cosigned_by` names the witnesses whose cosignature on the checkpoint verified and the quorum (`{\"witnesses\": [...], \"quorum\": k}`; null without a policy). The body is streamed into the verifier line by line: at most CAIRN_MAX_BUNDLE_BYTES in all (413 body_too_large) and CAIRN_MAX_BUNDLE_LINE_BYTES per line (413 line_too_long); a line whose parsed form could take more than 64 times that (counted as twice its JSON tree; JSON of many tiny objects or arrays) is 413 line_too_complex.",
    params(
        ("witness" = Option<String>, Query, description = "A witness's cosignature key (vkey, algorithm 0x04); repeatable. With it, the checkpoint that authenticates the verdict (the latest stored one; the bundle's) must carry valid cosignatures by `quorum` of the witnesses given, or the verdict fails with insufficient-cosignatures (docs/FORMAT.md 7.7)."),
        ("quorum" = Option<u64>, Query, description = "How many of the witness keys must have cosigned (default: all).", minimum = 1),
        ("checkpoint" = Option<String>, Query, description = "A signed checkpoint the caller trusts: the note exactly as `cairn checkpoint` printed it, base64-encoded (standard or URL-safe alphabet); repeatable. Verification fails unless the log is consistent with each; a value that is not a signed note at all is refused (400 invalid_checkpoint)."),
        ("key" = Option<String>, Query, description = "A server vkey (C2SP form) the bundle's checkpoint must be signed by; repeatable."),
    ),
    request_body(content = String, content_type = "application/x-ndjson", description = "A bundle: one JSON object per line (docs/FORMAT.md)"),
    responses(
        (status = 200, description = "OK", content_type = "application/json", body = serde_json::Value),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 429, description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn verify_bundle(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<Vec<(String, String)>>,
    request: axum::extract::Request,
) -> Result<Json, ApiError> {
    input::refuse_unknown_params(
        q.iter().map(|(k, _)| k),
        &["key", "checkpoint", "witness", "quorum"],
    )?;
    crate::limits::refuse_encoded_body(request.headers())?;
    use http_body_util::BodyExt as _;
    let trusted = trusted_param(&q)?;
    let policy = witness_policy_param(&q)?;
    // Counted before any key is decoded (each is a curve point), as
    // witnesses are.
    let keys_given = q.iter().filter(|(k, _)| k == "key").count();
    if keys_given > MAX_PINNED_KEYS {
        return Err(ApiError::bad_request(
            "invalid_argument",
            format!("at most {MAX_PINNED_KEYS} key parameters, not {keys_given}"),
        )
        .with_field("key"));
    }
    let pinned = q
        .iter()
        .filter(|(k, _)| k == "key")
        .map(|(_, v)| {
            query_vkey(v).map_err(|e| {
                ApiError::bad_request("invalid_argument", format!("key must be a vkey: {e}"))
                    .with_field("key")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let permit = limits::expensive(&state, caller.org(), "bundle verification").await?;
    let started = Instant::now();
    let max_line = state.config.limits.max_bundle_line_bytes;
    let max_total = state.config.max_bundle_bytes;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let (budget, org) = (Arc::clone(&state), caller.org().to_owned());
    let worker = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        // A line is parsed (when the typed step decoder leaves it) into a
        // tree that can take a hundred times its bytes: refused past the
        // limit, and counted with the request bodies' memory while it is
        // verified, so that concurrent uploads of such lines wait their
        // turn (503) instead of holding gigabytes together.
        let push = |verifier: &mut cairn_core::bundle::BundleVerifier,
                    line: &[u8],
                    number: u64|
         -> Result<bool, ApiError> {
            let line = cairn_core::bundle::trim_line_end(line);
            let bound =
                cairn_store::ops::checked_line_memory(line, max_line).map_err(|refused| {
                    let said = refused
                        .refusal("the bundle", number)
                        .unwrap_or_else(|| refused.to_string());
                    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "line_too_complex", said)
                })?;
            // Only a line long enough to be counted (scanned: its count is
            // then above its length) is held: a small line takes little,
            // and must not be refused mid-bundle while others hold the
            // budget.
            let _held = (bound > line.len())
                .then(|| crate::hold_memory(&budget, &org, bound))
                .transpose()?;
            Ok(verifier.push_bytes(line))
        };
        let mut verifier = cairn_core::bundle::BundleVerifier::new(pinned);
        if let Some(policy) = policy {
            verifier.require_witnesses(policy);
        }
        for note in trusted {
            verifier.trust_checkpoint(note);
        }
        let mut line: Vec<u8> = Vec::new();
        let mut number = 0u64;
        let too_long = |number: u64| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "line_too_long",
                cairn_store::ops::line_too_long("the bundle", number, max_line),
            )
        };
        'read: while let Some(chunk) = rx.blocking_recv() {
            let mut rest = &chunk[..];
            while let Some(at) = rest.iter().position(|&b| b == b'\n') {
                number += 1;
                if line.len() + at > max_line {
                    return Err(too_long(number));
                }
                line.extend_from_slice(&rest[..=at]);
                let going = push(&mut verifier, &line, number)?;
                line.clear();
                rest = &rest[at + 1..];
                if !going {
                    break 'read;
                }
            }
            if line.len() + rest.len() > max_line {
                return Err(too_long(number + 1));
            }
            line.extend_from_slice(rest);
        }
        if !line.is_empty() {
            push(&mut verifier, &line, number + 1)?;
        }
        Ok(verifier.finish())
    });
    let mut body = request.into_body();
    let mut total = 0usize;
    let mut read_error = None;
    while let Some(frame) = body.frame().await {
        match frame {
            Err(e) => {
                read_error = Some(limits::body_error(&e, max_total));
                break;
            }
            Ok(frame) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                total += data.len();
                if total > max_total {
                    read_error = Some(limits::body_too_large(max_total));
                    break;
                }
                // The verifier stopped (a failure, a line too long): the
                // rest is not read.
                if tx.send(data).await.is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let outcome = worker.await.map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "a worker failed",
        )
    })?;
    if let Some(e) = read_error {
        return Err(e);
    }
    // An empty body is a request without its bundle, not a bundle that
    // fails: say what to send.
    if total == 0 {
        return Err(ApiError::bad_request(
            "invalid_request",
            "the request body is empty: send the bundle's lines (application/x-ndjson), as `cairn export` wrote them",
        ));
    }
    let result = outcome?;
    state.metrics.verification(result.verdict.verified);
    let mut v = wire::verdict_to_json(
        &result.verdict,
        started.elapsed().as_millis(),
        cairn_store::now(),
    );
    // Whether this server signed it: a bundle that verifies under keys
    // named in itself is authentic under the keys whose signatures
    // verified, not under every key it names: this server vouches for it
    // only if one of its keys signed the checkpoint and, for a partial
    // bundle, the selection that says the bundle holds its whole scope (a
    // review kept this server's checkpoint, dropped a session's last step
    // and signed a new selection with a key added to the header).
    let signed_by_this_server = if !result.verdict.verified || result.signers.is_empty() {
        false
    } else {
        let org = caller.org().to_owned();
        let signers = result.signers.clone();
        let selection_signers = result
            .selection
            .is_some()
            .then(|| result.selection_signers.clone());
        blocking(&state, move |store| {
            let mut ours: Vec<String> = store
                .log_keys(&org)?
                .iter()
                .map(ToString::to_string)
                .collect();
            ours.push(store.server_key().to_string());
            let ours_among = |keys: &[String]| keys.iter().any(|k| ours.contains(k));
            Ok(ours_among(&signers) && selection_signers.as_deref().is_none_or(ours_among))
        })
        .await?
    };
    v["server_key"] = json!(result.server_key);
    v["key_pinned"] = json!(result.key_pinned);
    v["signed_by_this_server"] = json!(signed_by_this_server);
    v["checkpoint_size"] = json!(result.checkpoint.map(|c| c.0));
    // With a witness policy: who cosigned, of the quorum asked for.
    v["cosigned_by"] = wire::cosigned_by_to_json(result.cosigned_by.as_ref());
    Ok(axum::Json(v))
}
