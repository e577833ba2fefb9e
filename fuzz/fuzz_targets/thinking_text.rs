//! Free-form thinking text as every surface splits it into steps (seed
//! 002's `parseThinking`: `POST /v1/thinking/parse`, turns on REST and
//! MCP, `cairn thinking`). Nothing may panic; every step has trimmed,
//! non-empty content drawn from the text (no more non-blank characters
//! than it holds); the bounded parse is the whole parse or a refusal that
//! the whole parse has more steps than allowed; a step's one-line form
//! holds no line break.
#![no_main]

use cairn_core::thinking::{one_line, parse_thinking, parse_thinking_at_most};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&max, text)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(text);
    let whole = parse_thinking(&text);
    let non_blank = |s: &str| s.chars().filter(|c| !c.is_whitespace()).count();
    let given = non_blank(&text);
    let mut taken = 0;
    for step in &whole {
        assert!(!step.content.is_empty());
        assert_eq!(step.content.trim(), step.content);
        taken += non_blank(&step.content);
        let line = one_line(&step.content);
        assert!(!line.contains('\n') && !line.contains('\r'), "{line:?}");
    }
    assert!(
        taken <= given,
        "{taken} non-blank characters out of {given}"
    );
    let max = usize::from(max % 16);
    match parse_thinking_at_most(&text, max) {
        Ok(steps) => assert_eq!(steps, whole),
        Err(e) => {
            assert_eq!(e.max, max);
            assert!(whole.len() > max);
        }
    }
});
