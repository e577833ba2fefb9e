//! The C2SP tlog-tiles read API of the caller's org log (FORMAT.md 7.9):
//! `/v1/tlog/checkpoint`, hash tiles and entry bundles under
//! `/v1/tlog/tile/`, and Cairn's record tiles under `/v1/tlog/records/`.
//! Plain GETs that a monitor mirrors the whole log with, cacheable because
//! a tile, once the log holds it, never changes.

use super::*;
use cairn_core::tiles::{Tile, TileKind};

/// Cache policy of a resource that never changes (a hash tile, an entry
/// bundle): private, because every request carries an org's key.
const IMMUTABLE: &str = "private, max-age=31536000, immutable";

/// A record tile changes when a step in it is erased: revalidate.
const REVALIDATE: &str = "private, no-cache";

#[utoipa::path(
    get,
    path = "/v1/tlog/checkpoint",
    operation_id = "tlog_checkpoint",
    tag = "proofs",
    summary = "The org log's checkpoint, at the C2SP tlog-tiles path",
    description = "The same cosigned checkpoint note as /v1/checkpoint, at the path a C2SP tlog-tiles client expects: its prefix is /v1/tlog. Hash tiles are served at /v1/tlog/tile/<L>/<N>[.p/<W>], entry bundles at /v1/tlog/tile/entries/<N>[.p/<W>] and Cairn's record tiles at /v1/tlog/records/<N>[.p/<W>] (FORMAT.md 7.9). Any role.",
    responses(
        (status = 200, description = "The signed checkpoint note with its cosignatures", content_type = "text/plain", body = String),
        (status = "4XX", description = "An error", body = crate::api_doc::ErrorBody),
        (status = 503, description = "An error", body = crate::api_doc::ErrorBody),
    ),
)]
pub(crate) async fn checkpoint(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let cp = current_checkpoint(&state, caller.org()).await?;
    let note = cosigned(&state, caller.org(), cp).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "private, max-age=2"),
        ],
        note,
    )
        .into_response())
}

/// The tile routes: their paths hold a variable number of segments, which
/// an OpenAPI path cannot describe, so they are routed here and documented
/// in FORMAT.md 7.9 and on `/v1/tlog/checkpoint`.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/tlog/tile/{*path}", axum::routing::get(tile))
        .route("/v1/tlog/records/{*path}", axum::routing::get(records))
}

fn parse_tile(path: &str, records: bool) -> Result<Tile, ApiError> {
    Tile::parse(path, records).map_err(|e| {
        ApiError::bad_request(
            "invalid_argument",
            format!("{e}: tiles are named as in C2SP tlog-tiles (FORMAT.md 7.9)"),
        )
        .with_field("path")
    })
}

fn beyond_log(tile: &Tile, size: u64) -> ApiError {
    ApiError::not_found_because(format!(
        "{}: the log holds {size} entries, fewer than this tile needs",
        tile.path()
    ))
}

/// `GET /v1/tlog/tile/<L>/<N>[.p/<W>]` and `GET /v1/tlog/tile/entries/<N>[.p/<W>]`.
async fn tile(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tile = parse_tile(&path, false)?;
    let org = caller.org().to_owned();
    // An entry bundle rebuilds each leaf from its whole record (up to 256
    // records of a few MiB each, parsed): expensive work, in a slot. A
    // hash tile reads 256 stored hashes and takes none.
    let slot = match tile.kind {
        TileKind::Entries => Some(limits::expensive(&state, &org, "the entry bundle").await?),
        TileKind::Hashes(_) | TileKind::Records => None,
    };
    let body = blocking(&state, move |store| {
        let _slot = slot;
        let size = store.log_size(&org)?;
        let Some((start, end)) = tile.leaf_range().filter(|_| tile.within(size)) else {
            return Err(beyond_log(&tile, size));
        };
        if let TileKind::Hashes(_) = tile.kind {
            let hashes = store.hash_tile(&org, &tile)?;
            return Ok(hashes.iter().flat_map(|h| h.0).collect::<Vec<u8>>());
        }
        let mut leaves: Vec<Vec<u8>> = Vec::with_capacity(tile.width as usize);
        let mut broken = None;
        store.read_log(&org, start, end, &mut |stored| match stored.entry {
            Ok(entry) => {
                leaves.push(cairn_core::log::log_leaf_data(
                    entry.seq,
                    entry.entry_type(),
                    &entry.record_hash(),
                    entry.logged_at,
                ));
                true
            }
            Err(reason) => {
                broken = Some(format!("entry {} cannot be read: {reason}", stored.seq));
                false
            }
        })?;
        if let Some(reason) = broken {
            return Err(cairn_store::StoreError::Corrupt(reason).into());
        }
        if leaves.len() as u64 != tile.width {
            return Err(cairn_store::StoreError::Corrupt(format!(
                "the log holds {size} entries but {} of {} in {start}..{end} could be read",
                leaves.len(),
                tile.width
            ))
            .into());
        }
        cairn_core::tiles::encode_entry_bundle(leaves.iter().map(Vec::as_slice))
            .map_err(|e| cairn_store::StoreError::Corrupt(e).into())
    })
    .await?;
    let gzip = tile.kind == TileKind::Entries && accepts_gzip(&headers);
    let body = if gzip { gzipped(&body)? } else { body };
    let mut response = (
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (header::CACHE_CONTROL, IMMUTABLE),
        ],
        body,
    )
        .into_response();
    if gzip {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, "gzip".parse().expect("static"));
    }
    Ok(response)
}

/// `GET /v1/tlog/records/<N>[.p/<W>]`: the records of the entries an entry
/// bundle holds, one bundle entry line each (FORMAT.md 10.1), streamed,
/// then an end line `{"tile_end":{"entries":W,"log_size":S}}` where `S` is
/// the log's size read after the records (an erasure that hid a field of a
/// record served here is logged below `S`). A body without its end line
/// was cut short. Roles: auditor, admin (the whole content, as a complete
/// export).
async fn records(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(path): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(caller.key.role.can_export(), "read record tiles")?;
    let tile = parse_tile(&path, true)?;
    let org = caller.org().to_owned();
    let permit = limits::expensive(&state, &org, "the record tile").await?;
    let (start, end) = {
        let org = org.clone();
        blocking(&state, move |store| {
            let size = store.log_size(&org)?;
            tile.leaf_range()
                .filter(|_| tile.within(size))
                .ok_or_else(|| beyond_log(&tile, size))
        })
        .await?
    };
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let store = Arc::clone(&state.store);
    tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let _permit = permit;
        let mut out = ChannelWriter::new(tx.clone());
        let mut failure = None;
        let mut written = 0u64;
        let read = store.read_log(&org, start, end, &mut |stored| {
            let line = match stored.entry {
                Ok(entry) => cairn_core::bundle::encode_entry(&entry, None),
                Err(reason) => {
                    failure = Some(format!("entry {} cannot be read: {reason}", stored.seq));
                    return false;
                }
            };
            if let Err(e) = writeln!(out, "{line}") {
                failure = Some(e.to_string());
                return false;
            }
            written += 1;
            true
        });
        let outcome = match (read, failure) {
            (Err(e), _) => Err(e.to_string()),
            (Ok(()), Some(f)) => Err(f),
            (Ok(()), None) => store.log_size(&org).map_err(|e| e.to_string()),
        };
        let ended = outcome.and_then(|size| {
            let end = serde_json::json!({"tile_end": {"entries": written, "log_size": size}});
            writeln!(out, "{end}")
                .and_then(|()| out.flush())
                .map_err(|e| e.to_string())
        });
        if let Err(e) = ended {
            // The body is cut short, without its end line.
            tracing::warn!(error = %e, "record tile failed");
            let _ = tx.blocking_send(Err(std::io::Error::other(e)));
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, REVALIDATE),
        ],
        axum::body::Body::from_stream(ChannelBody::new(rx)),
    )
        .into_response())
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    == Some(0.0)
            });
            name.eq_ignore_ascii_case("gzip") && !refused
        })
}

fn gzipped(bytes: &[u8]) -> Result<Vec<u8>, ApiError> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.finish())
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))
}
