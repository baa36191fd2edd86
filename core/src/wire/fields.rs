//! Primitive field encoding shared by all message payloads: big-endian
//! integers and u16-length-prefixed UTF-8 strings.

use crate::error::Error;
use crate::wire::MessageType;

/// Appends big-endian fields to a frame buffer.
pub(crate) struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Self {
        Self { out }
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.out.push(v);
    }

    pub(crate) fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn i64(&mut self, v: i64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.out.extend_from_slice(v);
    }

    /// A u16-length-prefixed string. Callers validate lengths first; a
    /// string over `u16::MAX` bytes is an error, never silently cut.
    pub(crate) fn str(&mut self, v: &str, ty: MessageType) -> Result<(), Error> {
        let len = u16::try_from(v.len()).map_err(|_| Error::Malformed {
            message_type: ty,
            reason: "string longer than 65535 bytes",
        })?;
        self.u16(len);
        self.bytes(v.as_bytes());
        Ok(())
    }
}

/// Reads big-endian fields from one payload; every read is bounds-checked.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    ty: MessageType,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], ty: MessageType) -> Self {
        Self { buf, ty }
    }

    pub(crate) fn malformed(&self, reason: &'static str) -> Error {
        Error::Malformed {
            message_type: self.ty,
            reason,
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.buf.len() {
            return Err(self.malformed("payload ends inside a field"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let Some((head, rest)) = self.buf.split_first_chunk::<N>() else {
            return Err(self.malformed("payload ends inside a field"));
        };
        self.buf = rest;
        Ok(*head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Error> {
        self.array().map(u16::from_be_bytes)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Error> {
        self.array().map(u32::from_be_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Error> {
        self.array().map(u64::from_be_bytes)
    }

    pub(crate) fn i64(&mut self) -> Result<i64, Error> {
        self.array().map(i64::from_be_bytes)
    }

    pub(crate) fn string(&mut self) -> Result<String, Error> {
        self.text().map(str::to_owned)
    }

    /// A string field borrowed from the payload (no copy).
    pub(crate) fn text(&mut self) -> Result<&'a str, Error> {
        let len = self.u16()?;
        let bytes = self.take(usize::from(len))?;
        std::str::from_utf8(bytes).map_err(|_| self.malformed("string is not valid UTF-8"))
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// Errors if bytes remain after the last field.
    pub(crate) fn finish(self) -> Result<(), Error> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.malformed("trailing bytes after the last field"))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out);
        w.u8(7);
        w.u16(0x0102);
        w.u32(0x03040506);
        w.u64(u64::MAX - 1);
        w.i64(-5);
        w.str("héllo", MessageType::Ping).unwrap();
        assert_eq!(&out[..3], &[7, 1, 2]);
        let mut r = Reader::new(&out, MessageType::Ping);
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u16(), Ok(0x0102));
        assert_eq!(r.u32(), Ok(0x03040506));
        assert_eq!(r.u64(), Ok(u64::MAX - 1));
        assert_eq!(r.i64(), Ok(-5));
        assert_eq!(r.string().as_deref(), Ok("héllo"));
        assert!(r.u8().is_err());
        r.finish().unwrap();

        let mut r = Reader::new(&[0, 5, b'a'], MessageType::Ping);
        assert!(r.string().is_err());
        let mut r = Reader::new(&[0, 1, 0xff], MessageType::Ping);
        assert!(r.string().is_err());
        assert!(Reader::new(&[1], MessageType::Ping).finish().is_err());
        let long = "x".repeat(70_000);
        assert!(
            Writer::new(&mut Vec::new())
                .str(&long, MessageType::Ping)
                .is_err()
        );
    }
}
