//! Steps' seeds: 32 bytes each from the operating system's random source,
//! drawn a block at a time.
//!
//! A seed is the secret every salt of a step derives from (FORMAT.md 5.1),
//! so it must come from the OS's cryptographic generator, never from a
//! user-space generator seeded once. Asking the kernel for 32 bytes per
//! step cost about 1 µs of a writer's CPU (a system call per step,
//! docs/PERFORMANCE.md "Where ingest time goes"); asking for
//! [`BLOCK`] bytes at a time gives the same bytes for one call per
//! [`SEEDS_PER_BLOCK`] steps.
//!
//! Two rules keep a block's bytes from ever seeding two steps:
//!
//! - each seed's bytes are zeroed in the block as they are handed out, and
//!   each thread has its own block;
//! - a block belongs to the process that drew it: after a `fork`, the
//!   child holds a copy of its parent's block, so a thread whose process
//!   id changed throws its block away and draws a new one.

use std::cell::RefCell;

/// One seed's length.
pub(crate) const SEED_LEN: usize = 32;

/// How many seeds one draw from the OS holds.
const SEEDS_PER_BLOCK: usize = 32;

/// One draw's length.
const BLOCK: usize = SEED_LEN * SEEDS_PER_BLOCK;

/// A thread's unused seeds.
struct SeedBlock {
    bytes: [u8; BLOCK],
    /// Seeds handed out from `bytes` (zeroed).
    used: usize,
    /// The process that drew `bytes`.
    drawn_by: u32,
}

thread_local! {
    static SEEDS: RefCell<SeedBlock> = const {
        RefCell::new(SeedBlock { bytes: [0; BLOCK], used: SEEDS_PER_BLOCK, drawn_by: 0 })
    };
}

/// A fresh seed, never handed out before in this or any other process.
pub(crate) fn fresh() -> Result<[u8; SEED_LEN], getrandom::Error> {
    SEEDS.with(|block| {
        let mut block = block.borrow_mut();
        let process = std::process::id();
        if block.used == SEEDS_PER_BLOCK || block.drawn_by != process {
            getrandom::fill(&mut block.bytes)?;
            block.used = 0;
            block.drawn_by = process;
        }
        let at = block.used * SEED_LEN;
        let slot = &mut block.bytes[at..at + SEED_LEN];
        let mut seed = [0u8; SEED_LEN];
        seed.copy_from_slice(slot);
        slot.fill(0);
        block.used += 1;
        Ok(seed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_distinct_across_blocks_and_threads() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 * SEEDS_PER_BLOCK + 1 {
            assert!(seen.insert(fresh().unwrap()), "a seed came out twice");
        }
        let others: Vec<_> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        (0..SEEDS_PER_BLOCK + 1)
                            .map(|_| fresh().unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        for seed in others {
            assert!(seen.insert(seed), "two threads were handed the same seed");
        }
        assert!(!seen.contains(&[0u8; SEED_LEN]));
    }

    #[test]
    fn handed_out_seeds_do_not_stay_in_the_block() {
        let seed = fresh().unwrap();
        SEEDS.with(|block| {
            let block = block.borrow();
            assert!(block.used >= 1);
            assert!(block.bytes[..block.used * SEED_LEN].iter().all(|&b| b == 0));
            assert!(
                !block.bytes.windows(SEED_LEN).any(|w| w == seed),
                "a handed-out seed is still in the block"
            );
        });
    }

    #[test]
    fn a_block_from_another_process_is_not_used() {
        fresh().unwrap();
        // What a forked child sees: a block drawn under another process id.
        let copied = SEEDS.with(|block| {
            let mut block = block.borrow_mut();
            block.drawn_by = block.drawn_by.wrapping_add(1);
            block.bytes[block.used * SEED_LEN..].to_vec()
        });
        let seed = fresh().unwrap();
        assert!(
            !copied.windows(SEED_LEN).any(|w| w == seed),
            "a seed from a block drawn by another process was handed out"
        );
        SEEDS.with(|block| assert_eq!(block.borrow().drawn_by, std::process::id()));
    }
}
