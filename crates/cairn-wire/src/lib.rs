//! Cairn's readers and writers of outside bytes, apart from the server
//! that uses them: the strict JSON of step objects and its answers
//! ([`wire`]), the renderings of a session ([`render`]), OTLP/HTTP trace
//! bodies and their mapping to steps ([`otlp`]), and an embedding
//! service's answers ([`embedding_answer`]).
//!
//! Its own crate so that the fuzz targets, which fuzz exactly these
//! parsers, build them without the HTTP server, the MCP SDK and the
//! OpenAPI generator (`docs/SECURITY.md`, "Fuzzing"); `cairn-server`
//! re-exports each module under the name it always had.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod embedding_answer;
pub mod otlp;
pub mod render;
pub mod trail;
pub mod wire;
