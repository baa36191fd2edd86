//! [`PresentBitmap`]: which pages of a cached block are present on disk.
//!
//! # Persistent encoding
//!
//! [`PresentBitmap::to_bytes`] writes, and [`PresentBitmap::from_bytes`]
//! reads, exactly [`encoded_len`]`(pages)` = `ceil(pages / 8)` bytes of
//! presence bits: page `i` is bit `i % 8` (LSB first) of byte `i / 8`. Bits
//! past the page count in the last byte are zero.
//!
//! The page count is not stored: the owner of a bitmap always knows it (it
//! follows from the block geometry and the object's size) and passes it to
//! [`PresentBitmap::from_bytes`]. So 1024 pages take exactly 128 bytes, and a
//! block of 256 one-MiB pages 32 bytes. The encoding is stable; a different
//! layout would need a new function.

use std::ops::Range;

use crate::error::Error;

/// Most pages one bitmap (one block) can track: 2^20, i.e. 1 MiB pages in a
/// 1 TiB block or 4 KiB pages in a 4 GiB block.
pub const MAX_PAGES: u32 = 1 << 20;

/// Bytes [`PresentBitmap::to_bytes`] produces for `pages` pages:
/// `ceil(pages / 8)`.
pub const fn encoded_len(pages: u32) -> usize {
    (pages as usize).div_ceil(8)
}

/// A fixed-size set of page flags: bit set = page present.
///
/// Invariant: bits at or past [`pages`](Self::pages) are always clear.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PresentBitmap {
    pages: u32,
    words: Vec<u64>,
}

impl PresentBitmap {
    /// A bitmap of `pages` pages, all absent. Zero pages is allowed (a block
    /// past the end of its object). Errors with [`Error::TooManyPages`] above
    /// [`MAX_PAGES`].
    pub fn new(pages: u32) -> Result<Self, Error> {
        if pages > MAX_PAGES {
            return Err(Error::TooManyPages {
                pages: u64::from(pages),
                max: MAX_PAGES,
            });
        }
        Ok(Self {
            pages,
            words: vec![0; (pages as usize).div_ceil(64)],
        })
    }

    /// Number of pages tracked.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    /// Whether `page` is present. Errors with [`Error::PageOutOfRange`] if
    /// `page >= pages()`.
    pub fn is_present(&self, page: u32) -> Result<bool, Error> {
        self.check(page..page.saturating_add(1))?;
        Ok(self.bit(page))
    }

    /// Marks `page` present. Errors like [`is_present`](Self::is_present).
    pub fn set(&mut self, page: u32) -> Result<(), Error> {
        self.set_range(page..page.saturating_add(1))
    }

    /// Marks `page` absent. Errors like [`is_present`](Self::is_present).
    pub fn clear(&mut self, page: u32) -> Result<(), Error> {
        self.clear_range(page..page.saturating_add(1))
    }

    /// Marks every page in `pages` present. Errors with
    /// [`Error::PageOutOfRange`] if the range is reversed or reaches past
    /// [`pages()`](Self::pages); nothing changes then.
    pub fn set_range(&mut self, pages: Range<u32>) -> Result<(), Error> {
        self.check(pages.clone())?;
        for (i, mask) in word_masks(pages) {
            self.words[i] |= mask;
        }
        Ok(())
    }

    /// Marks every page in `pages` absent. Errors like
    /// [`set_range`](Self::set_range).
    pub fn clear_range(&mut self, pages: Range<u32>) -> Result<(), Error> {
        self.check(pages.clone())?;
        for (i, mask) in word_masks(pages) {
            self.words[i] &= !mask;
        }
        Ok(())
    }

    /// Whether every page in `pages` is present; `true` for an empty range.
    /// Errors like [`set_range`](Self::set_range).
    pub fn all_present(&self, pages: Range<u32>) -> Result<bool, Error> {
        self.check(pages.clone())?;
        Ok(word_masks(pages).all(|(i, mask)| self.words[i] & mask == mask))
    }

    /// The first maximal run of absent pages at or after `from`, or `None` if
    /// every page from `from` on is present (or `from >= pages()`).
    pub fn first_absent_run(&self, from: u32) -> Option<Range<u32>> {
        let start = self.next_with(from, false)?;
        let end = self.next_with(start, true).unwrap_or(self.pages);
        Some(start..end)
    }

    /// Number of present pages.
    pub fn count_present(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// Whether every page is present.
    pub fn is_complete(&self) -> bool {
        self.count_present() == self.pages
    }

    /// The persistent encoding described in the [module docs](self);
    /// exactly [`encoded_len`]`(self.pages())` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let len = encoded_len(self.pages);
        let mut out = Vec::with_capacity(len + 8);
        for word in &self.words {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// Decodes [`to_bytes`](Self::to_bytes) output for a bitmap of `pages`
    /// pages. Errors with [`Error::TooManyPages`] for a page count above
    /// [`MAX_PAGES`] and [`Error::InvalidBitmap`] if the length does not
    /// match the page count or bits past the page count are set. Allocates
    /// only after the length has been checked.
    pub fn from_bytes(pages: u32, body: &[u8]) -> Result<Self, Error> {
        if pages > MAX_PAGES {
            return Err(Error::TooManyPages {
                pages: u64::from(pages),
                max: MAX_PAGES,
            });
        }
        if body.len() != encoded_len(pages) {
            return Err(Error::InvalidBitmap("length does not match the page count"));
        }
        let mut bitmap = Self::new(pages)?;
        for (word, chunk) in bitmap.words.iter_mut().zip(body.chunks(8)) {
            let mut le = [0u8; 8];
            le[..chunk.len()].copy_from_slice(chunk);
            *word = u64::from_le_bytes(le);
        }
        let tail = pages % 64;
        if let (Some(last), true) = (bitmap.words.last(), tail != 0)
            && last >> tail != 0
        {
            return Err(Error::InvalidBitmap("bits set past the page count"));
        }
        Ok(bitmap)
    }

    fn check(&self, pages: Range<u32>) -> Result<(), Error> {
        if pages.start > pages.end || pages.end > self.pages {
            return Err(Error::PageOutOfRange {
                start: pages.start,
                end: pages.end,
                pages: self.pages,
            });
        }
        Ok(())
    }

    fn bit(&self, page: u32) -> bool {
        self.words[(page / 64) as usize] >> (page % 64) & 1 == 1
    }

    /// First page at or after `from` whose bit equals `present`.
    fn next_with(&self, from: u32, present: bool) -> Option<u32> {
        if from >= self.pages {
            return None;
        }
        let first = (from / 64) as usize;
        for (i, &word) in self.words.iter().enumerate().skip(first) {
            let mut bits = if present { word } else { !word };
            if i == first {
                bits &= !0u64 << (from % 64);
            }
            if bits != 0 {
                let page = (i as u32) * 64 + bits.trailing_zeros();
                // Past the end only when looking for absent pages in the
                // padding of the last word.
                return (page < self.pages).then_some(page);
            }
        }
        None
    }
}

/// `(word index, mask)` pairs covering `pages`, which must not be reversed.
fn word_masks(pages: Range<u32>) -> impl Iterator<Item = (usize, u64)> {
    let Range { start, end } = pages;
    let (first, last) = if start < end {
        (start / 64, (end - 1) / 64)
    } else {
        (1, 0) // empty
    };
    (first..=last).map(move |w| {
        let lo = if w == first { start % 64 } else { 0 };
        let hi = if w == last { (end - 1) % 64 + 1 } else { 64 };
        let upper = if hi == 64 { !0u64 } else { (1u64 << hi) - 1 };
        (w as usize, upper & (!0u64 << lo))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn with(pages: u32, present: &[u32]) -> PresentBitmap {
        let mut b = PresentBitmap::new(pages).unwrap();
        for &p in present {
            b.set(p).unwrap();
        }
        b
    }

    #[test]
    fn set_clear_test() {
        let mut b = PresentBitmap::new(130).unwrap();
        assert_eq!(b.is_present(129), Ok(false));
        b.set(129).unwrap();
        b.set(0).unwrap();
        b.set(64).unwrap();
        assert_eq!(b.is_present(129), Ok(true));
        assert_eq!(b.is_present(64), Ok(true));
        assert_eq!(b.is_present(63), Ok(false));
        assert_eq!(b.count_present(), 3);
        b.clear(64).unwrap();
        assert_eq!(b.is_present(64), Ok(false));
        assert_eq!(b.count_present(), 2);
        let oob = Error::PageOutOfRange {
            start: 130,
            end: 131,
            pages: 130,
        };
        assert_eq!(b.set(130), Err(oob.clone()));
        assert_eq!(b.is_present(130), Err(oob));
        assert!(b.set(u32::MAX).is_err());
    }

    #[test]
    fn limits() {
        assert!(PresentBitmap::new(MAX_PAGES).is_ok());
        assert_eq!(
            PresentBitmap::new(MAX_PAGES + 1),
            Err(Error::TooManyPages {
                pages: u64::from(MAX_PAGES) + 1,
                max: MAX_PAGES
            })
        );
        let empty = PresentBitmap::new(0).unwrap();
        assert!(empty.is_complete());
        assert_eq!(empty.first_absent_run(0), None);
        assert_eq!(empty.all_present(0..0), Ok(true));
    }

    #[test]
    fn ranges() {
        let mut b = PresentBitmap::new(200).unwrap();
        b.set_range(10..150).unwrap();
        assert_eq!(b.count_present(), 140);
        assert_eq!(b.all_present(10..150), Ok(true));
        assert_eq!(b.all_present(9..150), Ok(false));
        assert_eq!(b.all_present(10..151), Ok(false));
        assert_eq!(b.all_present(70..70), Ok(true));
        b.clear_range(64..128).unwrap();
        assert_eq!(b.count_present(), 76);
        assert_eq!(b.all_present(10..64), Ok(true));
        assert!(b.set_range(5..201).is_err());
        assert!(b.all_present(Range { start: 6, end: 5 }).is_err());
        assert_eq!(b.count_present(), 76, "failed calls change nothing");
        b.set_range(0..200).unwrap();
        assert!(b.is_complete());
    }

    #[test]
    fn first_absent_run_finds_maximal_runs() {
        let b = with(10, &[0, 1, 4, 9]);
        assert_eq!(b.first_absent_run(0), Some(2..4));
        assert_eq!(b.first_absent_run(3), Some(3..4));
        assert_eq!(b.first_absent_run(4), Some(5..9));
        assert_eq!(b.first_absent_run(9), None);
        assert_eq!(b.first_absent_run(10), None);
        assert_eq!(b.first_absent_run(u32::MAX), None);

        // Runs that cross word boundaries and end at the last page.
        let mut b = PresentBitmap::new(300).unwrap();
        b.set_range(0..70).unwrap();
        b.set_range(200..260).unwrap();
        assert_eq!(b.first_absent_run(0), Some(70..200));
        assert_eq!(b.first_absent_run(199), Some(199..200));
        assert_eq!(b.first_absent_run(200), Some(260..300));
        b.set_range(260..300).unwrap();
        assert_eq!(b.first_absent_run(200), None);

        // Exactly 64 pages: no padding to mistake for absent pages.
        let mut b = PresentBitmap::new(64).unwrap();
        b.set_range(0..64).unwrap();
        assert_eq!(b.first_absent_run(0), None);
    }

    #[test]
    fn encoding_layout_is_as_documented() {
        let b = with(10, &[0, 3, 9]);
        assert_eq!(b.to_bytes(), vec![0b0000_1001, 0b0000_0010]);
        assert_eq!(PresentBitmap::from_bytes(10, &b.to_bytes()), Ok(b));
        assert_eq!(encoded_len(0), 0);
        assert!(PresentBitmap::new(0).unwrap().to_bytes().is_empty());
    }

    #[test]
    fn thousand_and_twenty_four_pages_fit_in_128_bytes() {
        let mut b = PresentBitmap::new(1024).unwrap();
        b.set_range(0..1024).unwrap();
        let bytes = b.to_bytes();
        assert_eq!(bytes.len(), 128);
        assert_eq!(encoded_len(1024), 128);
        assert!(bytes.iter().all(|&x| x == 0xff));
        assert_eq!(PresentBitmap::from_bytes(1024, &bytes), Ok(b));
    }

    #[test]
    fn decode_rejects_corrupt_input() {
        // Page count 10 needs exactly 2 bytes.
        assert!(matches!(
            PresentBitmap::from_bytes(10, &[0]),
            Err(Error::InvalidBitmap(_))
        ));
        assert!(matches!(
            PresentBitmap::from_bytes(10, &[0, 0, 0]),
            Err(Error::InvalidBitmap(_))
        ));
        // Bit 10 set, past the page count.
        assert_eq!(
            PresentBitmap::from_bytes(10, &[0, 0b100]),
            Err(Error::InvalidBitmap("bits set past the page count"))
        );
        // A huge page count is rejected before allocating.
        assert!(matches!(
            PresentBitmap::from_bytes(u32::MAX, &[]),
            Err(Error::TooManyPages { .. })
        ));
    }
}
