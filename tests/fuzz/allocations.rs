//! The fuzz binary's allocator: the system one, keeping the largest single request seen and
//! refusing any over [`REFUSE_BYTES`]. The only unsafe code of the tests: a global allocator
//! is an unsafe trait by definition.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Larger requests fail (the process aborts with the size): no parser needs this much.
const REFUSE_BYTES: usize = 2 << 30;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

pub(crate) struct Bounded;

// SAFETY: every call is forwarded to `System` with the same layout and pointer.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > REFUSE_BYTES {
            return std::ptr::null_mut();
        }
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > REFUSE_BYTES {
            return std::ptr::null_mut();
        }
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The largest single allocation since the last call, resetting it.
pub(crate) fn take_largest() -> usize {
    LARGEST.swap(0, Ordering::Relaxed)
}
