//! [`LineBuf`]: a zeroed buffer that starts on a cache line: the forward pass's `f32`
//! activations and the KV cache's arrays (`LineBuf<f16>`, `LineBuf<i8>`).
//!
//! The forward pass's activation buffers are read and written in rows whose widths are
//! multiples of 16 values, one 64-byte cache line and one AVX-512 register. A `Vec<f32>` of a
//! megabyte comes from the C allocator's `mmap` path 16 bytes past a page boundary, so every
//! such register load or store straddled two lines, and two threads writing neighbouring cells
//! of a row could share a line. A `LineBuf` starts on a 64-byte boundary, so neither happens.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use half::f16;

/// Alignment of a [`LineBuf`]'s first value, in bytes.
pub const LINE: usize = 64;

/// Value types a [`LineBuf`] can hold.
///
/// # Safety
/// All-zero bytes must be a valid value of the type, and its alignment at most [`LINE`].
pub unsafe trait ZeroValid: Copy {}
// SAFETY: all-zero bits are 0.0; 4 bytes.
unsafe impl ZeroValid for f32 {}
// SAFETY: all-zero bits are f16 0.0; 2 bytes.
unsafe impl ZeroValid for f16 {}
// SAFETY: all-zero bits are 0; 1 byte.
unsafe impl ZeroValid for i8 {}

/// `len` values of `T`, zeroed when made, the first on a [`LINE`]-byte boundary. Pages are
/// zeroed by the system on first touch (the allocation is `alloc_zeroed`), so a large buffer
/// costs no memory until it is written. Derefs to `[T]`.
pub struct LineBuf<T: ZeroValid = f32> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: `LineBuf` owns its allocation exclusively (like `Vec<T>`), so it is `Send` when `T` is.
unsafe impl<T: ZeroValid + Send> Send for LineBuf<T> {}
// SAFETY: shared access only reads through `&[T]`, as for `Vec<T>`.
unsafe impl<T: ZeroValid + Sync> Sync for LineBuf<T> {}

impl<T: ZeroValid> LineBuf<T> {
    /// `len` zeros. Panics, as `vec!` does, if the size overflows `isize`; aborts on
    /// allocation failure.
    pub fn zeroed(len: usize) -> LineBuf<T> {
        let layout = Self::layout(len).expect("LineBuf size overflows isize");
        Self::alloc(len, layout).unwrap_or_else(|| alloc::handle_alloc_error(layout))
    }

    /// `len` zeros, or `None` if the size overflows `isize` or the allocation fails (for
    /// buffers sized by the configuration, as the KV cache's).
    pub fn try_zeroed(len: usize) -> Option<LineBuf<T>> {
        Self::alloc(len, Self::layout(len)?)
    }

    fn alloc(len: usize, layout: Layout) -> Option<LineBuf<T>> {
        if layout.size() == 0 {
            return Some(LineBuf {
                ptr: NonNull::dangling(),
                len,
            });
        }
        // SAFETY: `layout` has a non-zero size and a valid power-of-two alignment.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        // All-zero bytes are `len` valid values of T (`ZeroValid`).
        NonNull::new(raw.cast::<T>()).map(|ptr| LineBuf { ptr, len })
    }

    fn layout(len: usize) -> Option<Layout> {
        let bytes = len.checked_mul(size_of::<T>())?;
        Layout::from_size_align(bytes, LINE).ok()
    }
}

impl<T: ZeroValid> Deref for LineBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is `len` initialized (zeroed, then only written as T) values owned
        // by `self`, or dangling and well aligned with a zero size.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: ZeroValid> DerefMut for LineBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: ZeroValid> Drop for LineBuf<T> {
    fn drop(&mut self) {
        let layout = Self::layout(self.len).expect("checked when allocated");
        if layout.size() > 0 {
            // SAFETY: allocated in `alloc` with this same layout and not freed before.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}

impl<T: ZeroValid> std::fmt::Debug for LineBuf<T> {
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
            let mut b: LineBuf = LineBuf::zeroed(len);
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

    #[test]
    fn other_types_start_on_a_line_and_oversized_is_none() {
        for len in [0, 1, 63, 64, 65, 100_000] {
            let h = LineBuf::<f16>::try_zeroed(len).expect("small");
            let q = LineBuf::<i8>::try_zeroed(len).expect("small");
            assert_eq!((h.len(), q.len()), (len, len));
            if len > 0 {
                assert_eq!(h.as_ptr() as usize % LINE, 0);
                assert_eq!(q.as_ptr() as usize % LINE, 0);
            }
            assert!(h.iter().all(|&v| v == f16::ZERO) && q.iter().all(|&v| v == 0));
        }
        assert!(LineBuf::<f16>::try_zeroed(usize::MAX / 2).is_none());
    }
}
