//! Answers of an OpenAI-compatible embedding service
//! (`--embedding-endpoint`), as the server reads them: the first byte says
//! how many texts were sent, the rest is the answer. Nothing may panic;
//! an accepted answer has one vector per text, all of one length, each
//! finite and of unit length.
#![no_main]

use cairn_wire::embedding_answer::parse_answer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&count, body)) = data.split_first() else {
        return;
    };
    let expected = usize::from(count % 8);
    if let Ok(vectors) = parse_answer(body, expected, 0) {
        assert_eq!(vectors.len(), expected);
        for vector in &vectors {
            assert_eq!(vector.len(), vectors[0].len());
            assert!(vector.iter().all(|x| x.is_finite()));
            let norm: f64 = vector.iter().map(|x| f64::from(*x) * f64::from(*x)).sum();
            assert!((norm - 1.0).abs() < 1e-3, "norm {norm}");
        }
    }
});
