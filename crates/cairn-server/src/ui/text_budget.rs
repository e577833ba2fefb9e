//! How much text a page shows: each field cut to 64 KiB, the page to
//! 4 MiB in all, JSON indented only as far as it will be shown.

use serde_json::Value;

/// Bytes of one field shown (a step's content, input or output, an
/// event's detail); a longer one is cut, with a note saying so.
pub(super) const FIELD_SHOWN_BYTES: usize = 64 * 1024;

/// Bytes of such text one page shows in all: past it, later fields are
/// replaced by a note. Payloads may be nested JSON that indenting makes
/// many times larger, so the text is bounded as it is written, never
/// rendered whole first: a page costs a few megabytes whatever the
/// session holds.
pub(super) const PAGE_TEXT_BYTES: usize = 4 * 1024 * 1024;

/// Bytes of a step's metadata shown (folded under its card), and of all
/// metadata on one page: its own budget, so that metadata (which every
/// OTLP step carries, resource and attributes) never takes the room of
/// the steps' content, inputs and outputs.
pub(super) const METADATA_SHOWN_BYTES: usize = 16 * 1024;
/// See [`METADATA_SHOWN_BYTES`].
pub(super) const PAGE_METADATA_BYTES: usize = 1024 * 1024;

/// What is left of a page's [`PAGE_TEXT_BYTES`] (and of its
/// [`PAGE_METADATA_BYTES`]).
pub(super) struct TextBudget {
    left: usize,
    metadata_left: usize,
}

/// `bytes` as text, without a character a cut split.
fn whole_characters(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
    }
}

const NOT_SHOWN: &str = "(not shown: this page already shows as much text as it holds; \
                         GET /v1/sessions/{id} and an export hold it whole)";

impl TextBudget {
    pub(super) fn new() -> TextBudget {
        TextBudget {
            left: PAGE_TEXT_BYTES,
            metadata_left: PAGE_METADATA_BYTES,
        }
    }

    /// A line drawn from a step's metadata (its span), charged to the
    /// page's metadata budget; `None` once that budget is spent.
    pub(super) fn metadata_line(&mut self, line: String) -> Option<String> {
        if self.metadata_left == 0 {
            return None;
        }
        self.metadata_left = self.metadata_left.saturating_sub(line.len());
        Some(line)
    }

    /// A step's metadata as indented JSON, cut to its own field limit and
    /// what the page's metadata budget has left (the rest of the page's
    /// text is not spent on it).
    pub(super) fn metadata(&mut self, value: &Value) -> String {
        let mut own = TextBudget {
            left: self.metadata_left,
            metadata_left: 0,
        };
        let shown = own.json_at_most(value, METADATA_SHOWN_BYTES);
        self.metadata_left = own.left;
        shown
    }

    fn limit(&self) -> Option<usize> {
        self.limit_of(FIELD_SHOWN_BYTES)
    }

    fn limit_of(&self, field: usize) -> Option<usize> {
        (self.left > 0).then(|| self.left.min(field))
    }

    fn spend(&mut self, text: String, cut: bool) -> String {
        self.left = self.left.saturating_sub(text.len());
        if cut {
            text + "\n… (cut here: the rest is not shown on this page; \
                    GET /v1/sessions/{id} and an export hold it whole)"
        } else {
            text
        }
    }

    /// `text`, cut to what the page has left.
    pub(super) fn text(&mut self, text: &str) -> String {
        let Some(limit) = self.limit() else {
            return NOT_SHOWN.to_owned();
        };
        let cut = text.len() > limit;
        let mut end = limit.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.spend(text[..end].to_owned(), cut)
    }

    /// `value` as indented JSON, cut to what the page has left.
    pub(super) fn json(&mut self, value: &Value) -> String {
        self.json_at_most(value, FIELD_SHOWN_BYTES)
    }

    /// [`TextBudget::json`] with a field limit of `field` bytes.
    fn json_at_most(&mut self, value: &Value, field: usize) -> String {
        let Some(limit) = self.limit_of(field) else {
            return NOT_SHOWN.to_owned();
        };
        // The writer fails once full, which stops the serializer.
        let mut out = crate::held::AtMostBytes::new(limit);
        let cut = serde_json::to_writer_pretty(&mut out, value).is_err();
        self.spend(whole_characters(out.into_bytes()), cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metadata has its own budget: however much of it a page shows, the
    /// steps' content keeps the page's whole text budget.
    #[test]
    fn metadata_never_takes_the_contents_room() {
        let mut budget = TextBudget::new();
        let big = serde_json::json!({"resource": "r".repeat(40_000)});
        for _ in 0..200 {
            let shown = budget.metadata(&big);
            assert!(shown.len() <= METADATA_SHOWN_BYTES + 200, "{}", shown.len());
        }
        assert_eq!(budget.left, PAGE_TEXT_BYTES);
        assert_eq!(budget.metadata(&big), NOT_SHOWN);
        assert_eq!(budget.text("content"), "content");
    }

    /// Fields are cut at the field's limit, on a character boundary, and
    /// once the page's budget is spent later fields are not shown at all.
    #[test]
    fn shown_text_is_bounded_per_field_and_per_page() {
        let mut budget = TextBudget::new();
        let short = budget.text("short");
        assert_eq!(short, "short");
        let long = "é".repeat(FIELD_SHOWN_BYTES);
        let cut = budget.text(&long);
        let (shown, note) = cut.split_once("\n… (cut here").unwrap();
        assert!(shown.len() <= FIELD_SHOWN_BYTES && shown.len() > FIELD_SHOWN_BYTES - 2);
        assert!(shown.chars().all(|c| c == 'é'), "no split character");
        assert!(note.contains("not shown on this page"));
        let mut nested = serde_json::json!(vec![0; 100_000]);
        for _ in 0..40 {
            nested = serde_json::json!([nested]);
        }
        let json = budget.json(&nested);
        assert!(json.len() < FIELD_SHOWN_BYTES + 200, "{}", json.len());
        assert!(json.starts_with("[\n  [\n"));
        while budget.left > 0 {
            budget.json(&nested);
        }
        assert_eq!(budget.text("anything"), NOT_SHOWN);
        assert_eq!(budget.json(&serde_json::json!(1)), NOT_SHOWN);
        // A small value is written whole, as before.
        let mut fresh = TextBudget::new();
        assert_eq!(
            fresh.json(&serde_json::json!({"rows": 3})),
            "{\n  \"rows\": 3\n}"
        );
    }
}
