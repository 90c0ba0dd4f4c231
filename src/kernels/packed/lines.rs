//! The memory of packed weights: a fixed-capacity buffer of 64-byte lines that starts on a
//! 2 MiB boundary when it spans a huge page, so transparent huge pages can back all of it.
//!
//! Decode streams every packed byte once per token. With 4 KiB pages each page costs a TLB
//! walk and the CPU's stream prefetchers stop at every page boundary; `madvise(MADV_HUGEPAGE)`
//! (THP's `madvise` mode) only helps on the whole 2 MiB pages inside the buffer, and a buffer
//! from the ordinary allocator starts anywhere, so a 2.4 MiB matrix (Llama-3.2-1B's `wq`) got
//! at most one huge page and a 1.8 MiB one none: 61% of a layer's packed bytes were in huge
//! pages (`examples/gemv_bw`, `AnonHugePages`). Aligned, only the tail past the last whole
//! huge page stays in small pages; nothing is allocated beyond the lines asked for (the
//! allocator's alignment slack is address space, never touched).

use std::alloc::Layout;
use std::ptr::NonNull;

use super::Line;

/// The huge page size buffers align to.
const HUGE: usize = 2 << 20;

/// Up to `capacity` 64-byte lines, filled front to back by [`Lines::push`], then read whole.
pub struct Lines {
    ptr: NonNull<Line>,
    len: usize,
    layout: Layout,
}

// SAFETY: `Lines` owns its allocation exactly as a `Vec<Line>` does (no shared state, no
// interior mutability), and `Line` is plain bytes.
unsafe impl Send for Lines {}
// SAFETY: as above: `&Lines` only reads.
unsafe impl Sync for Lines {}

impl Lines {
    /// An empty buffer with room for `n` lines, 2 MiB aligned (and its whole huge pages advised
    /// to the OS as such) when it holds at least one huge page. Aborts on allocation failure,
    /// as `Vec` does.
    pub fn with_capacity(n: usize) -> Lines {
        let bytes = n.max(1) * 64;
        let align = if bytes >= HUGE { HUGE } else { 64 };
        let layout = Layout::from_size_align(bytes, align).expect("packed weights size");
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(p as *mut Line) else {
            std::alloc::handle_alloc_error(layout)
        };
        #[cfg(target_os = "linux")]
        if bytes >= HUGE {
            // SAFETY: the first `bytes / HUGE` whole huge pages lie inside the (untouched)
            // allocation; the advice only changes how the kernel backs them, never their
            // contents or validity.
            unsafe {
                libc::madvise(
                    p as *mut libc::c_void,
                    bytes / HUGE * HUGE,
                    libc::MADV_HUGEPAGE,
                )
            };
        }
        Lines {
            ptr,
            len: 0,
            layout,
        }
    }

    /// Lines of room.
    fn capacity(&self) -> usize {
        self.layout.size() / 64
    }

    /// Appends `bytes` (a whole number of lines). Panics past the capacity.
    pub fn push(&mut self, bytes: &[u8]) {
        assert!(bytes.len().is_multiple_of(64), "a whole number of lines");
        let n = bytes.len() / 64;
        assert!(self.len + n <= self.capacity(), "packed lines overflow");
        // SAFETY: lines len..len + n lie inside the allocation (checked above) and do not
        // overlap `bytes` (which the caller borrows from elsewhere: `&mut self` is unique).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(self.len) as *mut u8,
                bytes.len(),
            )
        };
        self.len += n;
    }

    /// The lines pushed so far, as bytes (64-byte aligned).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the first `len` lines were written by `push` and stay valid while `self` is
        // borrowed; `Line` is 64 plain bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr() as *const u8, self.len * 64) }
    }
}

impl Clone for Lines {
    fn clone(&self) -> Lines {
        let mut c = Lines::with_capacity(self.len);
        c.push(self.bytes());
        c
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_capacity` with this very layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_buffers_start_on_a_huge_page_and_keep_their_bytes() {
        let n = HUGE / 64 + 100;
        let mut l = Lines::with_capacity(n);
        assert_eq!(l.bytes().as_ptr() as usize % HUGE, 0);
        let data: Vec<u8> = (0..n * 64).map(|i| (i % 251) as u8).collect();
        l.push(&data[..64 * 7]);
        l.push(&data[64 * 7..]);
        assert_eq!(l.bytes(), &data[..]);
        assert_eq!(l.clone().bytes(), &data[..]);
        let small = Lines::with_capacity(3);
        assert_eq!(small.bytes().as_ptr() as usize % 64, 0);
        assert!(small.bytes().is_empty());
    }

    #[test]
    #[should_panic(expected = "overflow")]
    fn pushing_past_the_capacity_panics() {
        Lines::with_capacity(1).push(&[0; 128]);
    }
}
