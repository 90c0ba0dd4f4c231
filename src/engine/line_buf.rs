//! [`LineBuf`]: a zeroed `f32` buffer that starts on a cache line.
//!
//! The forward pass's activation buffers are read and written in rows whose widths are
//! multiples of 16 values, one 64-byte cache line and one AVX-512 register. A `Vec<f32>` of a
//! megabyte comes from the C allocator's `mmap` path 16 bytes past a page boundary, so every
//! such register load or store straddled two lines, and two threads writing neighbouring cells
//! of a row could share a line. A `LineBuf` starts on a 64-byte boundary, so neither happens.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of a [`LineBuf`]'s first value, in bytes.
pub const LINE: usize = 64;

/// `len` `f32` values, zeroed when made, the first on a [`LINE`]-byte boundary. Pages are
/// zeroed by the system on first touch (the allocation is `alloc_zeroed`), so a large buffer
/// costs no memory until it is written. Derefs to `[f32]`.
pub struct LineBuf {
    ptr: NonNull<f32>,
    len: usize,
}

// SAFETY: `LineBuf` owns its allocation exclusively (like `Vec<f32>`); `f32` is `Send + Sync`.
unsafe impl Send for LineBuf {}
// SAFETY: shared access only reads through `&[f32]`, as for `Vec<f32>`.
unsafe impl Sync for LineBuf {}

impl LineBuf {
    /// `len` zeros. Panics, as `vec!` does, if the size overflows `isize`; aborts on
    /// allocation failure.
    pub fn zeroed(len: usize) -> LineBuf {
        if len == 0 {
            return LineBuf {
                ptr: NonNull::dangling(),
                len: 0,
            };
        }
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (len > 0) and a valid power-of-two alignment.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<f32>()) else {
            alloc::handle_alloc_error(layout);
        };
        LineBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        let bytes = len
            .checked_mul(size_of::<f32>())
            .expect("LineBuf size overflows usize");
        Layout::from_size_align(bytes, LINE).expect("LineBuf size overflows isize")
    }
}

impl Deref for LineBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `ptr` is `len` initialized (zeroed, then only written as f32) values owned
        // by `self`, or dangling and well aligned with `len == 0`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for LineBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for LineBuf {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `zeroed` with this same layout and not freed before.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) };
        }
    }
}

impl std::fmt::Debug for LineBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineBuf").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_line_zeroed_and_holds_writes() {
        for len in [0, 1, 15, 16, 17, 1000, 300_000] {
            let mut b = LineBuf::zeroed(len);
            assert_eq!(b.len(), len);
            if len > 0 {
                assert_eq!(b.as_ptr() as usize % LINE, 0, "len {len}");
            }
            assert!(b.iter().all(|&v| v == 0.0));
            for (i, v) in b.iter_mut().enumerate() {
                *v = i as f32;
            }
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as f32));
        }
    }
}
