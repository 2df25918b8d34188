//! Handing a big cycle's memory back to the OS.
//!
//! A full cycle holds every workspace's report, config and apply at once; afterwards the agent
//! keeps only its index and ledger, about a KiB per workspace. What the allocator does with the
//! freed peak decides the RSS (BENCHMARKS.md):
//! - jemalloc (the default build, `src/main.rs`) keeps small objects of one size together and
//!   its background thread returns freed pages a second later; after a big cycle the agent
//!   only logs what stays in use.
//! - glibc malloc (`--no-default-features`) keeps freed memory in its arenas, and small
//!   long-lived objects pin pages among the freed ones: two arenas, a fixed mmap threshold and
//!   `malloc_trim` after big cycles.

/// Cycles that start this many applies, and every full cycle, release memory when they finish.
pub const RELEASE_AFTER_ACTIONS: usize = 64;

/// The capacity to shrink a drained map or set to, if any. A table that held every workspace
/// for a full cycle keeps its size when emptied (~1 MB at 10,000); halving it once it is a
/// quarter full costs O(n) over the whole drain.
pub fn drained_capacity(len: usize, capacity: usize) -> Option<usize> {
    (len * 4 < capacity && capacity > 64).then_some(len * 2)
}

/// Set glibc malloc up for a long-lived process with a big, bursty heap; call it before any
/// thread starts. A no-op with jemalloc, and when `GLIBC_TUNABLES` is set (the operator's
/// choice wins).
/// - Two arenas, not eight per core: each arena keeps its own free pages (BENCHMARKS.md:
///   9.4 → 7.4 KB per workspace at 10,000 with this alone).
/// - A fixed mmap threshold: blocks from 128 KiB up (LIST pages, a full sync's request and
///   answer) are mapped and unmapped whole. glibc's default raises the threshold after each
///   such free, after which they land in the heap and fragment it.
pub fn configure_allocator() {
    #[cfg(all(not(feature = "jemalloc"), target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        // SAFETY: mallopt only sets allocator parameters; called before other threads exist.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
    }
}

/// After a big cycle: return free pages to the OS where the allocator does not on its own,
/// and log the heap still in use, next to which the RSS shows the allocator's share.
pub fn release_free_memory() {
    #[cfg(feature = "jemalloc")]
    {
        use tikv_jemalloc_ctl::{epoch, stats};
        if epoch::advance().is_ok()
            && let (Ok(in_use), Ok(resident)) = (stats::allocated::read(), stats::resident::read())
        {
            tracing::debug!(heap_in_use_bytes = in_use, allocator_resident_bytes = resident, "released free memory");
        }
    }
    #[cfg(all(not(feature = "jemalloc"), target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim and mallinfo2 have no preconditions; they only walk the allocator's
    // own structures.
    unsafe {
        libc::malloc_trim(0);
        let info = libc::mallinfo2();
        tracing::debug!(
            heap_in_use_bytes = info.uordblks + info.hblkhd,
            heap_free_bytes = info.fordblks,
            "released free memory"
        );
    }
}
