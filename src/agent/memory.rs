//! Handing a big cycle's memory back to the OS.
//!
//! A full cycle holds every workspace's report, config and apply at once; afterwards the agent
//! keeps only its index and ledger, a few KiB per workspace. glibc's malloc keeps what was
//! freed in its arenas, so without a trim the agent's RSS stays at the cycle's peak
//! (BENCHMARKS.md: heaptrack showed a 4 MB live heap at 1,000 workspaces under a 40 MB RSS).
//! `malloc_trim` returns every free page of every arena, not only the top of the heap.

/// Set glibc malloc up for a long-lived process with a big, bursty heap. Call it before any
/// thread starts.
/// - Two arenas, not eight per core: each arena keeps its own free pages, and the pages a full
///   cycle's worker threads leave in theirs are where the RSS above the live heap was
///   (BENCHMARKS.md: 9.4 → 7.4 KB per workspace at 10,000 with this alone).
/// - A fixed mmap threshold: blocks from 128 KiB up (LIST pages, a full sync's request and
///   answer) are mapped and unmapped whole. glibc's default raises the threshold after each
///   such free, after which they land in the heap and fragment it.
/// Explicit `GLIBC_TUNABLES` win: then nothing is changed.
pub fn configure_allocator() {
    if std::env::var_os("GLIBC_TUNABLES").is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Cycles that start this many applies, and every full cycle, trim when they finish.
pub const TRIM_AFTER_ACTIONS: usize = 64;

/// Return the allocator's free pages to the OS, and log what stays in use: the heap the
/// agent's data really holds, next to which the RSS shows the allocator's share. A no-op where
/// malloc is not glibc's (the musl image).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
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
