//! C2SP tlog-tiles names (from request paths) and entry bundles (from a
//! log's answers, as a monitor reads them). Nothing may panic; a name that
//! parses is the canonical one of its tile, and an entry bundle that
//! decodes encodes back to the same bytes.
#![no_main]

use cairn_core::tiles::{Tile, decode_entry_bundle, encode_entry_bundle};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (name, bundle) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(name) = std::str::from_utf8(name) {
        for records in [false, true] {
            if let Ok(tile) = Tile::parse(name, records) {
                let path = tile.path();
                let rest = path
                    .strip_prefix(if records { "records/" } else { "tile/" })
                    .expect("a tile's path has its prefix");
                assert_eq!(rest, name, "only the canonical name parses");
                assert!(tile.leaf_range().is_some());
            }
        }
    }
    if let Ok(entries) = decode_entry_bundle(bundle) {
        let again = encode_entry_bundle(entries.iter().copied()).expect("decoded entries fit");
        assert_eq!(again, bundle);
    }
});
