//! An OpenAI-style embedding service's answer
//! (`{"data": [{"index", "embedding": [floats]}]}`), read strictly: as
//! many vectors as texts, each index once, every vector of one length,
//! finite and not zero; L2-normalised here, whatever the service does.
//! The client that asks for it is `cairn-server`'s `embedding_endpoint`.

use cairn_store::embed::EmbedError;

/// The longest vector accepted.
const MAX_DIMENSIONS: usize = 16_384;

/// The vectors of an OpenAI-style answer, in input order, normalised;
/// `dimensions` 0 accepts any (consistent) length.
pub fn parse_answer(
    bytes: &[u8],
    expected: usize,
    dimensions: usize,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    #[derive(serde::Deserialize)]
    struct Answer {
        data: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        index: Option<usize>,
        embedding: Vec<f32>,
    }
    let answer: Answer = serde_json::from_slice(bytes)
        .map_err(|e| EmbedError(format!("not an embeddings answer: {e}")))?;
    if answer.data.len() != expected {
        return Err(EmbedError(format!(
            "{} vectors for {expected} texts",
            answer.data.len()
        )));
    }
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (position, item) in answer.data.into_iter().enumerate() {
        let index = item.index.unwrap_or(position);
        let slot = vectors
            .get_mut(index)
            .ok_or_else(|| EmbedError(format!("index {index} out of range")))?;
        if slot.is_some() {
            return Err(EmbedError(format!("index {index} twice")));
        }
        let mut vector = item.embedding;
        let length = if dimensions == 0 {
            vector.len()
        } else {
            dimensions
        };
        if vector.is_empty()
            || vector.len() != length
            || vector.len() > MAX_DIMENSIONS
            || vector.iter().any(|x| !x.is_finite())
        {
            return Err(EmbedError(format!(
                "a vector of {} numbers (expected {length}, at most {MAX_DIMENSIONS}, all finite)",
                vector.len()
            )));
        }
        // In f64: squares of large f32s overflow f32.
        let norm = vector
            .iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
            .sqrt();
        if norm == 0.0 || !norm.is_finite() {
            return Err(EmbedError("a vector of zeros".into()));
        }
        vector
            .iter_mut()
            .for_each(|x| *x = (f64::from(*x) / norm) as f32);
        *slot = Some(vector);
    }
    let vectors: Vec<Vec<f32>> = vectors.into_iter().flatten().collect();
    if let Some(first) = vectors.first()
        && vectors.iter().any(|v| v.len() != first.len())
    {
        return Err(EmbedError("vectors of different lengths".into()));
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_ordered_by_index_normalised_and_checked() {
        let answer = br#"{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}"#;
        let vectors = parse_answer(answer, 2, 0).unwrap();
        assert_eq!(vectors, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        for (bad, why) in [
            (&br#"{"data":[{"embedding":[1]}]}"#[..], "count"),
            (
                br#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
                "twice",
            ),
            (
                br#"{"data":[{"index":5,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
                "range",
            ),
            (
                br#"{"data":[{"embedding":[1,2]},{"embedding":[1]}]}"#,
                "lengths",
            ),
            (br#"{"data":[{"embedding":[]},{"embedding":[]}]}"#, "empty"),
            (
                br#"{"data":[{"embedding":[0,0]},{"embedding":[1,0]}]}"#,
                "zeros",
            ),
            (br#"{"error":"x"}"#, "shape"),
        ] {
            assert!(parse_answer(bad, 2, 0).is_err(), "{why}");
        }
        assert!(parse_answer(br#"{"data":[{"embedding":[1,2,3]}]}"#, 1, 2).is_err());
        // Squares beyond f32's range still normalise.
        let big = parse_answer(br#"{"data":[{"embedding":[3e30,4e30]}]}"#, 1, 0).unwrap();
        assert!((big[0][0] - 0.6).abs() < 1e-6 && (big[0][1] - 0.8).abs() < 1e-6);
    }
}
