//! The embedder settings shared by `serve`, `mcp`, `search` and `reindex`:
//! a model directory run in process, an OpenAI-compatible service, or
//! (neither given) the built-in word hash. docs/OPERATIONS.md, Search.

use anyhow::Result;
use cairn_store::embed::Embedder;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

/// Which embedder ranks by meaning.
#[derive(Debug, Clone, Args)]
pub(crate) struct EmbeddingArgs {
    /// A sentence-transformers model directory (config.json,
    /// tokenizer.json, model.safetensors; all-MiniLM-L6-v2 for example),
    /// run in process on the CPU. Loaded at start; a bad directory stops
    /// the start.
    #[arg(long, global = true, env = "CAIRN_EMBEDDING_MODEL")]
    embedding_model: Option<PathBuf>,
    /// An OpenAI-compatible embedding service instead (plain http; a URL
    /// without a path means /v1/embeddings). Asked once at start. The
    /// bearer token, if it needs one, comes from CAIRN_EMBEDDING_API_KEY.
    #[arg(
        long,
        global = true,
        env = "CAIRN_EMBEDDING_ENDPOINT",
        conflicts_with = "embedding_model"
    )]
    embedding_endpoint: Option<String>,
    /// The `model` field sent to --embedding-endpoint.
    #[arg(long, global = true, env = "CAIRN_EMBEDDING_ENDPOINT_MODEL")]
    embedding_endpoint_model: Option<String>,
    /// Megabytes of vectors semantic search keeps in memory (each org's
    /// vectors of the current embedder; an org that does not fit is
    /// scored from the store).
    #[arg(
        long,
        global = true,
        env = "CAIRN_VECTOR_MEMORY_MB",
        default_value_t = 1024
    )]
    pub(crate) vector_memory_mb: usize,
    /// Steps the background embedder embeds at once.
    #[arg(long, global = true, env = "CAIRN_EMBEDDING_BATCH", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub(crate) embedding_batch: u64,
}

impl EmbeddingArgs {
    /// The configured embedder, loaded (or its service asked) now.
    pub(crate) fn embedder(&self) -> Result<Arc<dyn Embedder>> {
        if let Some(dir) = &self.embedding_model {
            return cairn_server::load_embedding_model(dir).map_err(crate::cli::usage);
        }
        if let Some(url) = &self.embedding_endpoint {
            let Some(model) = self.embedding_endpoint_model.clone() else {
                return Err(crate::cli::usage(
                    "--embedding-endpoint needs --embedding-endpoint-model (CAIRN_EMBEDDING_ENDPOINT_MODEL): the model name the service expects",
                ));
            };
            let config = cairn_server::embedding_endpoint::EndpointConfig {
                url: url.clone(),
                model,
                api_key: std::env::var("CAIRN_EMBEDDING_API_KEY")
                    .ok()
                    .filter(|k| !k.is_empty()),
            };
            return cairn_server::embedding_endpoint::EndpointEmbedder::connect(config)
                .map(|e| Arc::new(e) as Arc<dyn Embedder>)
                .map_err(crate::cli::usage);
        }
        Ok(Arc::new(cairn_store::embed::WordHash))
    }
}
