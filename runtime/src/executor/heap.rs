//! The process heap's settings for a node: freed memory stays with the process.
//!
//! A node frees memory in bursts and asks for it again at once: the sender-based log is
//! released a checkpoint's worth at a time and refilled by the next iterations' messages,
//! and each checkpoint builds an image of the set. glibc's defaults hand such memory back
//! to the kernel (trimming the heap top, and giving every allocation above 128 KiB its
//! own mapping), so the next burst pays a page fault per 4 KiB and a system call per heap
//! growth: measured on jacobi2d with recovery on, 4.7× the page faults and 20× the
//! `mprotect` calls of the same run with recovery off. MPI libraries tune the allocator
//! the same way (Open MPI's `mallopt` of trimming and mapping for registered memory).
//! `LAZARUS_HEAP=default` keeps glibc's defaults.

use std::sync::Once;

/// Largest allocation served from the heap instead of a mapping of its own: messages and
/// checkpoint pieces up to this size reuse freed heap memory.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 64 << 20;
/// Free memory at the heap top that may stay with the process (never trimmed below).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 1 << 30;
/// Extra memory requested at each heap growth, so growth is rare.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TOP_PAD: libc::c_int = 16 << 20;

/// Applies the settings once per process (unless `LAZARUS_HEAP=default`).
pub(crate) fn configure() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var("LAZARUS_HEAP").is_ok_and(|v| v.trim() == "default") {
            return;
        }
        apply();
    });
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply() {
    for (param, value) in [
        (libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (libc::M_TOP_PAD, TOP_PAD),
    ] {
        // SAFETY: mallopt only changes glibc's allocator parameters; it is thread-safe
        // (it takes the arenas' locks) and the values are within glibc's accepted ranges.
        if unsafe { libc::mallopt(param, value) } != 1 {
            tracing::debug!(param, value, "mallopt refused a heap setting");
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn apply() {}
