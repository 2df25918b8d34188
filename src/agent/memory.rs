//! Handing a big cycle's memory back to the OS.
//!
//! A full cycle holds every workspace's report, config and apply at once; afterwards the agent
//! keeps only its index and ledger, a few KiB per workspace. glibc's malloc keeps what was
//! freed in its arenas, so without a trim the agent's RSS stays at the cycle's peak
//! (BENCHMARKS.md: heaptrack showed a 4 MB live heap at 1,000 workspaces under a 40 MB RSS).
//! `malloc_trim` returns every free page of every arena, not only the top of the heap.

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
