//! An embedder that asks an OpenAI-compatible embedding service
//! (`POST /v1/embeddings` with `{"model", "input": [texts]}`, answering
//! `{"data": [{"index", "embedding": [floats]}]}`): Ollama, vLLM, llama.cpp,
//! text-embeddings-inference, LocalAI, or a TLS-terminating proxy in front
//! of a hosted service. Plain HTTP only (Cairn carries no TLS stack).
//! The answer is read, checked and L2-normalised (whatever the service
//! does) by `cairn-wire`'s `embedding_answer`, which the fuzz targets
//! exercise.

use axum::body::Bytes;
use cairn_store::embed::{EmbedError, Embedder};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

use cairn_wire::embedding_answer::parse_answer;

/// Largest answer read from the service.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The embedding service's settings.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// `http://host:port/path`; a URL without a path means `/v1/embeddings`.
    pub url: String,
    /// The `model` field sent.
    pub model: String,
    /// Sent as `Authorization: Bearer` if set.
    pub api_key: Option<String>,
}

/// The embedder (see the module docs).
pub struct EndpointEmbedder {
    config: EndpointConfig,
    uri: axum::http::Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Runtime,
    id: String,
    description: String,
    dimensions: usize,
}

impl std::fmt::Debug for EndpointEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointEmbedder")
            .field("url", &self.config.url)
            .field("model", &self.config.model)
            .field("dimensions", &self.dimensions)
            .finish()
    }
}

/// The URI requests go to: the URL as given, or `/v1/embeddings` on a URL
/// with no path.
pub fn endpoint_uri(url: &str) -> Result<axum::http::Uri, String> {
    let uri: axum::http::Uri = url
        .parse()
        .map_err(|e| format!("{url} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "{url}: https is not supported (Cairn carries no TLS stack); point it at a local proxy that adds TLS, or at a service on plain http"
            ));
        }
        _ => return Err(format!("{url}: the URL must start with http://")),
    }
    if uri.host().is_none() {
        return Err(format!("{url}: the URL has no host"));
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(
            "the embedding endpoint URL holds credentials: give the token in CAIRN_EMBEDDING_API_KEY instead".into(),
        );
    }
    if matches!(uri.path(), "" | "/") && uri.query().is_none() {
        return format!("{}/v1/embeddings", url.trim_end_matches('/'))
            .parse()
            .map_err(|e| format!("{url}: {e}"));
    }
    Ok(uri)
}

impl EndpointEmbedder {
    /// Connects to the service and embeds a probe text, to fail at start
    /// rather than at the first step, and to learn the vectors' length.
    pub fn connect(config: EndpointConfig) -> Result<EndpointEmbedder, String> {
        let uri = endpoint_uri(&config.url)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting the embedding client: {e}"))?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = {
            let _entered = runtime.enter();
            Client::builder(TokioExecutor::new()).build(connector)
        };
        let mut embedder = EndpointEmbedder {
            id: String::new(),
            description: String::new(),
            dimensions: 0,
            config,
            uri,
            client,
            runtime,
        };
        let probe = embedder
            .request(&["cairn"])
            .map_err(|e| format!("the embedding service at {}: {e}", embedder.uri))?;
        let dimensions = probe.first().map_or(0, Vec::len);
        embedder.dimensions = dimensions;
        embedder.id = format!("endpoint:{}:{dimensions}", embedder.config.model);
        // Search answers show this to every tenant: no address.
        embedder.description = format!(
            "{} ({dimensions} dimensions, embedding service)",
            embedder.config.model
        );
        Ok(embedder)
    }

    /// The length of its vectors.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = serde_json::json!({ "model": self.config.model, "input": texts }).to_string();
        let mut request = axum::http::Request::post(self.uri.clone())
            .header(axum::http::header::CONTENT_TYPE, "application/json");
        if let Some(key) = &self.config.api_key {
            request = request.header(axum::http::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| EmbedError(e.to_string()))?;
        let answer = self.runtime.block_on(async {
            tokio::time::timeout(TIMEOUT, async {
                let response = self
                    .client
                    .request(request)
                    .await
                    .map_err(|e| format!("no answer: {e}"))?;
                let status = response.status();
                let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                    .collect()
                    .await
                    .map_err(|e| format!("reading the answer: {e}"))?
                    .to_bytes();
                Ok::<_, String>((status, bytes))
            })
            .await
            .map_err(|_| format!("no answer within {} s", TIMEOUT.as_secs()))?
        });
        let (status, bytes) = answer.map_err(EmbedError)?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned();
            return Err(EmbedError(format!("the service answered {status}: {text}")));
        }
        parse_answer(&bytes, texts.len(), self.dimensions)
    }
}

impl Embedder for EndpointEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.request(texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_without_a_path_mean_the_openai_path() {
        assert_eq!(
            endpoint_uri("http://localhost:11434").unwrap().to_string(),
            "http://localhost:11434/v1/embeddings"
        );
        assert_eq!(
            endpoint_uri("http://h:1/api/embed").unwrap().path(),
            "/api/embed"
        );
        assert!(
            endpoint_uri("https://api.openai.com")
                .unwrap_err()
                .contains("TLS")
        );
        assert!(endpoint_uri("ftp://x").is_err());
        assert!(
            endpoint_uri("http://user:secret@h:1/")
                .unwrap_err()
                .contains("CAIRN_EMBEDDING_API_KEY")
        );
        assert!(endpoint_uri("not a url").is_err());
    }
}
