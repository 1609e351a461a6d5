//! Asymmetric memory fences (Linux `membarrier(2)`): a frequent side that orders its
//! store before its load with a compiler fence only, and a rare side that pays for both
//! with a system call making every running thread of the process execute a full fence.
//! The recovery layer counts messages between actors of a node this way (one plain
//! store per message on the sending core's counter).

/// `membarrier(2)` commands (linux/membarrier.h).
#[cfg(target_os = "linux")]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
#[cfg(target_os = "linux")]
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Registers this process for [`heavy`]; false where the kernel (before 4.14) or a
/// seccomp filter refuses it, and then callers must use full fences on both sides.
pub(crate) fn register() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
            )
        };
        r == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// The light side: keeps the compiler from moving this thread's earlier stores after its
/// later loads. Pairs with [`heavy`] on another thread.
#[inline]
pub(crate) fn light() {
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// The heavy side: when this returns, every thread of the process has executed a full
/// fence since the call began, so a light-side thread either had its store visible to
/// this thread's later loads, or its later load sees this thread's earlier stores. False
/// if the system call failed (then nothing is ordered). Only after [`register`]
/// succeeded.
pub(crate) fn heavy() -> bool {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as in `register`.
        let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) };
        r == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_process_can_fence_every_thread() {
        if register() {
            assert!(heavy(), "registered, so the expedited barrier must work");
        }
    }
}
