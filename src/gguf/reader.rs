//! A bounds-checked little-endian cursor over the file bytes. Every read names the field it
//! reads, so a short file reports which field ran out and where.

use super::error::GgufError;

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// The current byte offset.
    pub fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the cursor.
    pub fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// The next `n` bytes; an error naming `field` when fewer are left.
    pub fn take(&mut self, n: u64, field: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::truncated(field, self.pos(), n, self.remaining()));
        }
        // `n <= remaining <= usize::MAX`, so the cast and the addition are exact.
        let n = n as usize;
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, field: &str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(field)?[0])
    }
    pub fn u16(&mut self, field: &str) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }
    pub fn u32(&mut self, field: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }
    pub fn u64(&mut self, field: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }
    pub fn i8(&mut self, field: &str) -> Result<i8, GgufError> {
        Ok(self.u8(field)? as i8)
    }
    pub fn i16(&mut self, field: &str) -> Result<i16, GgufError> {
        Ok(i16::from_le_bytes(self.array(field)?))
    }
    pub fn i32(&mut self, field: &str) -> Result<i32, GgufError> {
        Ok(i32::from_le_bytes(self.array(field)?))
    }
    pub fn i64(&mut self, field: &str) -> Result<i64, GgufError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }
    pub fn f32(&mut self, field: &str) -> Result<f32, GgufError> {
        Ok(f32::from_le_bytes(self.array(field)?))
    }
    pub fn f64(&mut self, field: &str) -> Result<f64, GgufError> {
        Ok(f64::from_le_bytes(self.array(field)?))
    }

    /// A GGUF bool: one byte, 0 or 1 (anything else is an error, as in gguf.cpp).
    pub fn bool(&mut self, field: &str) -> Result<bool, GgufError> {
        let at = self.pos();
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(GgufError::too_large(field, at, v.into(), 1)),
        }
    }

    /// A GGUF string: `u64` byte length then UTF-8 bytes. The length is checked against the
    /// bytes left and against `limit` before anything is allocated.
    pub fn string(&mut self, field: &str, limit: u64) -> Result<String, GgufError> {
        self.str(field, limit).map(str::to_string)
    }

    /// Like [`Reader::string`], borrowing the bytes instead of copying them.
    pub fn str(&mut self, field: &str, limit: u64) -> Result<&'a str, GgufError> {
        let at = self.pos();
        let len = self.u64(field)?;
        if len > limit {
            return Err(GgufError::too_large(field, at, len, limit));
        }
        let bytes = self.take(len, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s),
            Err(_) => Err(GgufError::BadUtf8 {
                field: field.to_string(),
                offset: at,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_name_the_field() {
        let mut r = Reader::new(&[1, 0, 0]);
        let e = r.u32("thing").unwrap_err().to_string();
        assert!(e.contains("thing") && e.contains("offset 0"), "{e}");
        assert_eq!(r.u16("x").unwrap(), 1);
        assert_eq!(r.remaining(), 1);
    }

    #[test]
    fn huge_string_length_is_refused_before_allocating() {
        let mut b = u64::MAX.to_le_bytes().to_vec();
        b.extend_from_slice(b"abc");
        let e = Reader::new(&b).string("key", u64::MAX).unwrap_err();
        assert!(
            matches!(
                e,
                GgufError::Truncated {
                    needed: u64::MAX,
                    ..
                }
            ),
            "{e}"
        );
        let e = Reader::new(&b).string("key", 16).unwrap_err();
        assert!(matches!(e, GgufError::TooLarge { limit: 16, .. }), "{e}");
    }
}
