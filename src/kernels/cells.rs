//! [`OutCells`]: the output a panel GEMM writes. A call over rows `r0..r1` of a matrix writes
//! `out[t * stride + r]` for its own rows and tokens only, so when a team splits a matrix by
//! rows the threads' cells interleave in memory: disjoint cells, overlapping extents. A
//! `&mut [f32]` per thread over its extent would claim what the others write; this view
//! carries a pointer and the extent's length instead, and a GEMM writes through it only the
//! cells its contract names ([`crate::kernels::row::PackedGemmFn`]).

use std::marker::PhantomData;

/// The extent `ptr..ptr + len` of f32 cells a GEMM call may write, for `'a`. Whoever makes
/// one from raw parts vouches that the cells the call writes are its alone; the GEMM writes
/// no other cell of the extent.
pub struct OutCells<'a> {
    ptr: *mut f32,
    len: usize,
    _cells: PhantomData<&'a mut [f32]>,
}

impl<'a> OutCells<'a> {
    /// All of `out`, which nobody else touches while the view lives.
    pub fn new(out: &'a mut [f32]) -> Self {
        OutCells {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            _cells: PhantomData,
        }
    }

    /// The `len` cells from `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len` lies in one live allocation of f32s for `'a`, and while the view
    /// lives nobody else reads or writes the cells the GEMM call it is passed to writes (as
    /// that call's shape names them). The extent's other cells may be read and written by
    /// others meanwhile: the call never touches them.
    pub unsafe fn from_raw(ptr: *mut f32, len: usize) -> Self {
        OutCells {
            ptr,
            len,
            _cells: PhantomData,
        }
    }

    /// Cells in the extent (the bound a GEMM checks its shape against).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the extent is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The extent's first cell. Only the cells of the call's contract may be written
    /// through it, and none read.
    pub fn as_mut_ptr(&mut self) -> *mut f32 {
        self.ptr
    }

    /// Writes `v` to cell `i`.
    ///
    /// # Safety
    /// `i` is one of the cells the call's contract names (so `i < len`).
    pub unsafe fn write(&mut self, i: usize, v: f32) {
        invariant!(i < self.len);
        // SAFETY: the caller's contract: `i` is in the extent and one of this call's cells,
        // which nobody else touches (`from_raw`'s / `new`'s guarantee).
        unsafe { self.ptr.add(i).write(v) }
    }
}

impl<'a> From<&'a mut [f32]> for OutCells<'a> {
    fn from(out: &'a mut [f32]) -> Self {
        OutCells::new(out)
    }
}

#[cfg(test)]
mod tests {
    use super::OutCells;

    #[test]
    fn a_view_of_a_slice_spans_it_and_writes_its_cells() {
        let mut v = vec![0.0f32; 6];
        let mut o = OutCells::from(&mut v[..]);
        assert_eq!(o.len(), 6);
        assert!(!o.is_empty());
        // SAFETY: 4 < 6 and the view is the slice's only user.
        unsafe { o.write(4, 2.5) };
        assert_eq!(v, [0.0, 0.0, 0.0, 0.0, 2.5, 0.0]);
    }
}
