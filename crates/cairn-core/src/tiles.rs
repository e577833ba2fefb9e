//! C2SP tlog-tiles: the static read API a monitor mirrors an org log with
//! (`docs/FORMAT.md` section 7.9).
//!
//! A log of `size` leaves is served as *hash tiles* (256 consecutive Merkle
//! tree hashes at tree level `8 * L`), *entry bundles* (the leaves' data,
//! each prefixed by its length as a big-endian u16) and, Cairn's addition
//! at its own URL, *record tiles* (the records the leaves commit to, as
//! bundle entry lines). This module names tiles, computes their contents
//! from a tree, and encodes and decodes entry bundles; it does no I/O.

use crate::hash::Hash;
use crate::merkle::{ProofError, SubtreeHashes, node_hash};

/// Hashes (or entries) in a full tile.
pub const TILE_WIDTH: u64 = 256;

/// Tree levels spanned by one tile level.
pub const TILE_HEIGHT: u32 = 8;

/// What a tile holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileKind {
    /// Merkle tree hashes at tile level `L` (tree level `8 * L`).
    Hashes(u8),
    /// An entry bundle: the leaves' data.
    Entries,
    /// Cairn's record tile: the records, one bundle entry line each.
    Records,
}

/// One tile: its kind, index and width (256 for a full tile, 1 to 255 for a
/// partial one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    /// What the tile holds.
    pub kind: TileKind,
    /// The tile's index within its level.
    pub index: u64,
    /// Number of hashes or entries: 256 for a full tile.
    pub width: u64,
}

impl Tile {
    /// The tile level: the `L` of a hash tile, 0 for entries and records.
    pub fn level(&self) -> u32 {
        match self.kind {
            TileKind::Hashes(level) => u32::from(level),
            TileKind::Entries | TileKind::Records => 0,
        }
    }

    /// Whether the tile is full (and so immutable).
    pub fn is_full(&self) -> bool {
        self.width == TILE_WIDTH
    }

    /// The first leaf the tile covers and the first one after it, or `None`
    /// if they do not fit in a u64 (no log can be that large).
    pub fn leaf_range(&self) -> Option<(u64, u64)> {
        let shift = TILE_HEIGHT.checked_mul(self.level())?;
        let span = 1u64.checked_shl(shift)?;
        let first = self.index.checked_mul(TILE_WIDTH)?;
        let start = first.checked_mul(span)?;
        let end = first.checked_add(self.width)?.checked_mul(span)?;
        Some((start, end))
    }

    /// Whether a tree of `size` leaves holds every hash or entry of the
    /// tile (a partial tile of width `W` exists once its `W` subtrees are
    /// complete; the tile of the same index with another width is another
    /// resource).
    pub fn within(&self, size: u64) -> bool {
        self.leaf_range().is_some_and(|(_, end)| end <= size)
    }

    /// Parses the part of a tile URL after `tile/` (`0/x001/234.p/5`,
    /// `entries/000`) or, for a record tile, after `records/` (`000.p/9`).
    /// Only the canonical spelling is accepted, so that one tile has one
    /// URL.
    pub fn parse(path: &str, records: bool) -> Result<Tile, String> {
        let (kind, rest) = if records {
            (TileKind::Records, path)
        } else {
            let (head, rest) = path
                .split_once('/')
                .ok_or_else(|| format!("{path:?} is not <L>/<N> or entries/<N>"))?;
            let kind = if head == "entries" {
                TileKind::Entries
            } else {
                let level: u8 = head
                    .parse()
                    .ok()
                    .filter(|l: &u8| *l <= 63 && head == l.to_string())
                    .ok_or_else(|| format!("tile level {head:?} is not an integer 0 to 63"))?;
                TileKind::Hashes(level)
            };
            (kind, rest)
        };
        let (index_part, width) = match rest.split_once(".p/") {
            Some((index, width)) => {
                let w: u64 = width
                    .parse()
                    .ok()
                    .filter(|w| (1..TILE_WIDTH).contains(w) && width == w.to_string())
                    .ok_or_else(|| format!("partial width {width:?} is not an integer 1 to 255"))?;
                (index, w)
            }
            None => (rest, TILE_WIDTH),
        };
        let index = parse_index(index_part)?;
        let tile = Tile { kind, index, width };
        if tile.leaf_range().is_none() {
            return Err(format!("tile {path:?} lies beyond any possible log"));
        }
        Ok(tile)
    }

    /// The tile's path below the log's prefix: `tile/<L>/<N>[.p/<W>]`,
    /// `tile/entries/<N>[.p/<W>]` or `records/<N>[.p/<W>]`.
    pub fn path(&self) -> String {
        let mut path = match self.kind {
            TileKind::Hashes(level) => format!("tile/{level}/{}", index_path(self.index)),
            TileKind::Entries => format!("tile/entries/{}", index_path(self.index)),
            TileKind::Records => format!("records/{}", index_path(self.index)),
        };
        if !self.is_full() {
            path.push_str(&format!(".p/{}", self.width));
        }
        path
    }
}

/// `<N>` as zero-padded three-digit path elements, all but the last with an
/// `x`: 1234067 is `x001/x234/067`.
pub fn index_path(index: u64) -> String {
    let mut groups = vec![index % 1000];
    let mut rest = index / 1000;
    while rest > 0 {
        groups.push(rest % 1000);
        rest /= 1000;
    }
    let last = groups.len() - 1;
    groups
        .iter()
        .rev()
        .enumerate()
        .map(|(i, g)| {
            if i == last {
                format!("{g:03}")
            } else {
                format!("x{g:03}")
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn parse_index(text: &str) -> Result<u64, String> {
    let bad =
        || format!("tile index {text:?} is not zero-padded x-prefixed groups of three digits");
    let mut index: u64 = 0;
    let parts: Vec<&str> = text.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let digits = if i + 1 == parts.len() {
            *part
        } else {
            part.strip_prefix('x').ok_or_else(bad)?
        };
        if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let group: u64 = digits.parse().map_err(|_| bad())?;
        index = index
            .checked_mul(1000)
            .and_then(|i| i.checked_add(group))
            .ok_or_else(bad)?;
    }
    if index_path(index) != text {
        return Err(bad());
    }
    Ok(index)
}

/// The hashes of a hash tile: `MTH(D[(n*256 + i) * 256^L .. (n*256 + i + 1) * 256^L])`
/// for `i` below its width, read from `tree`.
pub fn tile_hashes<T: SubtreeHashes>(
    tree: &T,
    tile: &Tile,
) -> Result<Vec<Hash>, ProofError<T::Error>> {
    let TileKind::Hashes(level) = tile.kind else {
        return Err(ProofError::OutOfRange("not a hash tile".into()));
    };
    if !tile.within(tree.size()) {
        return Err(ProofError::OutOfRange(format!(
            "tile {} needs more than the log's {} entries",
            tile.path(),
            tree.size()
        )));
    }
    let tree_level = TILE_HEIGHT * u32::from(level);
    let first = tile.index * TILE_WIDTH;
    (first..first + tile.width)
        .map(|i| tree.subtree(tree_level, i).map_err(ProofError::Read))
        .collect()
}

/// The tiles a client reads to learn every hash of a tree of `size`
/// leaves: for each level, the full tiles and the one partial tile.
pub fn tiles_of_size(size: u64) -> Vec<Tile> {
    let mut tiles = Vec::new();
    for level in 0..=7u8 {
        let span = 1u128 << (TILE_HEIGHT * u32::from(level));
        let hashes = (u128::from(size) / span) as u64;
        if hashes == 0 {
            break;
        }
        for index in 0..hashes / TILE_WIDTH {
            tiles.push(Tile {
                kind: TileKind::Hashes(level),
                index,
                width: TILE_WIDTH,
            });
        }
        if !hashes.is_multiple_of(TILE_WIDTH) {
            tiles.push(Tile {
                kind: TileKind::Hashes(level),
                index: hashes / TILE_WIDTH,
                width: hashes % TILE_WIDTH,
            });
        }
    }
    tiles
}

/// The root of a tile's hashes taken as the leaves of a subtree of height
/// 8 (for a full tile, the hash one level up).
pub fn tile_root(hashes: &[Hash]) -> Option<Hash> {
    let mut level: Vec<Hash> = hashes.to_vec();
    if level.is_empty() {
        return None;
    }
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| match pair {
                [l, r] => node_hash(l, r),
                [one] => *one,
                _ => unreachable!("chunks(2) yields one or two"),
            })
            .collect();
    }
    level.pop()
}

/// An entry bundle: each entry as a big-endian u16 length then its bytes.
/// Fails if an entry is longer than 65,535 bytes.
pub fn encode_entry_bundle<'a>(
    entries: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for entry in entries {
        let len = u16::try_from(entry.len()).map_err(|_| {
            format!(
                "an entry of {} bytes does not fit a u16 length",
                entry.len()
            )
        })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(entry);
    }
    Ok(out)
}

/// The entries of an entry bundle, refusing a truncated one.
pub fn decode_entry_bundle(bytes: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut entries = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let [hi, lo, tail @ ..] = rest else {
            return Err("an entry bundle ends inside a length prefix".into());
        };
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        if tail.len() < len {
            return Err(format!(
                "an entry bundle's entry {} claims {len} bytes; {} remain",
                entries.len(),
                tail.len()
            ));
        }
        entries.push(&tail[..len]);
        rest = &tail[len..];
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{MemoryTree, leaf_hash, range_hash};

    #[test]
    fn index_paths_are_the_specs_examples() {
        assert_eq!(index_path(0), "000");
        assert_eq!(index_path(1234067), "x001/x234/067");
        assert_eq!(index_path(1000), "x001/000");
        assert_eq!(parse_index("x001/x234/067"), Ok(1234067));
        for bad in [
            "0", "0000", "x000/001", "001/002", "x1/002", "abc", "", "x001/",
        ] {
            assert!(parse_index(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tile_paths_round_trip_and_only_canonical_ones_parse() {
        for path in ["0/000", "1/x001/234.p/5", "entries/000.p/255", "7/000.p/3"] {
            let tile = Tile::parse(path, false).unwrap();
            assert_eq!(tile.path(), format!("tile/{path}"));
        }
        let rec = Tile::parse("x002/000.p/7", true).unwrap();
        assert_eq!(rec.path(), "records/x002/000.p/7");
        for bad in [
            "00/000",
            "64/000",
            "0/000.p/0",
            "0/000.p/256",
            "0/000.p/07",
            "0/000.p/",
            "entries",
            "0/-01",
            "7/x018/446/744/073/709/551/615",
        ] {
            assert!(Tile::parse(bad, false).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_spec_example_tree_of_70000() {
        let tiles = tiles_of_size(70_000);
        let level0: Vec<_> = tiles.iter().filter(|t| t.level() == 0).collect();
        assert_eq!(level0.len(), 274);
        assert_eq!(level0.last().unwrap().width, 112);
        let level1: Vec<_> = tiles.iter().filter(|t| t.level() == 1).collect();
        assert_eq!(
            level1.iter().map(|t| t.width).collect::<Vec<_>>(),
            [256, 17]
        );
        let level2: Vec<_> = tiles.iter().filter(|t| t.level() == 2).collect();
        assert_eq!(level2.iter().map(|t| t.width).collect::<Vec<_>>(), [1]);
        let t256 = tiles_of_size(256);
        assert_eq!(t256.len(), 2);
        assert_eq!((t256[1].level(), t256[1].width), (1, 1));
    }

    #[test]
    fn a_full_tile_hashes_to_the_hash_a_level_up() {
        let mut tree = MemoryTree::new();
        for i in 0..(3 * 256 + 10) as u64 {
            tree.push(leaf_hash(&i.to_be_bytes()));
        }
        let tile = Tile {
            kind: TileKind::Hashes(0),
            index: 1,
            width: 256,
        };
        let hashes = tile_hashes(&tree, &tile).unwrap();
        assert_eq!(hashes.len(), 256);
        assert_eq!(
            tile_root(&hashes),
            Some(range_hash(&tree, 256, 512).unwrap())
        );
        let up = tile_hashes(
            &tree,
            &Tile {
                kind: TileKind::Hashes(1),
                index: 0,
                width: 3,
            },
        )
        .unwrap();
        assert_eq!(up[1], tile_root(&hashes).unwrap());
        let beyond = Tile {
            kind: TileKind::Hashes(0),
            index: 3,
            width: 11,
        };
        assert!(tile_hashes(&tree, &beyond).is_err());
    }

    #[test]
    fn entry_bundles_round_trip_and_truncation_is_refused() {
        let entries: Vec<&[u8]> = vec![b"a", b"", &[7u8; 300]];
        let bytes = encode_entry_bundle(entries.iter().copied()).unwrap();
        assert_eq!(decode_entry_bundle(&bytes).unwrap(), entries);
        assert!(decode_entry_bundle(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_entry_bundle(&[0]).is_err());
        assert!(encode_entry_bundle([&[0u8; 70_000][..]]).is_err());
    }
}
