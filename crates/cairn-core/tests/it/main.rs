//! Integration tests of cairn-core: published vectors, tamper properties
//! and the worked example of docs/FORMAT.md.

mod format_example;
mod tamper;
mod vectors;
