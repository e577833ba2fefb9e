//! OTLP/HTTP trace bodies: decoding (binary protobuf or OTLP/JSON,
//! optionally gzip- or deflate-compressed, within budgets: [`decode`]) and
//! the mapping of spans (GenAI semantic conventions, OpenInference) to
//! steps ([`map`]). The endpoints that use them are `cairn-server`'s
//! `otlp` module (`docs/OTLP.md`).

#[cfg(test)]
mod amplification_tests;
mod attrs;
pub mod decode;
mod discarded;
mod json;
mod json_hint;
pub mod map;
mod messages;
mod schema;
#[cfg(test)]
mod tests;

pub use attrs::{id_from, stored_session_hint};
pub use decode::{
    DecodeError, DecodeLimits, Encoding, decode_otlp, decode_otlp_with, decompress, protobuf_hint,
};
pub use discarded::{DiscardedSignal, count_discarded};
pub use json_hint::json_member_hint;
