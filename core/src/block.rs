//! Block and page math: how an object's bytes divide into blocks (the unit
//! of placement) and blocks into pages (the unit of presence and of origin
//! fetches).
//!
//! An object of `N` bytes has `ceil(N / block_size)` blocks; block `i`
//! covers bytes `[i * block_size, min((i + 1) * block_size, N))`, so only
//! the last block may be short. A block of `L` bytes has
//! `ceil(L / page_size)` pages and only its last page may be short. All
//! arithmetic is overflow-safe for any `u64` object size.

use std::iter::FusedIterator;
use std::ops::Range;

use crate::bitmap::MAX_PAGES;
use crate::error::Error;
use crate::identity::{BlockId, ObjectId, ObjectVersion};

/// Default block size: 256 MiB.
pub const DEFAULT_BLOCK_SIZE: u64 = 256 << 20;

/// Default page size: 1 MiB, so a 64 KiB or 1 MiB read fetches little more
/// than it needs on a miss.
pub const DEFAULT_PAGE_SIZE: u64 = 1 << 20;

/// Block and page sizes, validated together.
///
/// Invariants: both are powers of two, `page_size <= block_size`, and a
/// block has at most [`MAX_PAGES`] pages (so its presence fits a
/// [`PresentBitmap`](crate::PresentBitmap)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockGeometry {
    block_size: u64,
    page_size: u64,
}

impl Default for BlockGeometry {
    /// 256 MiB blocks of 1 MiB pages.
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl BlockGeometry {
    /// [`DEFAULT_BLOCK_SIZE`] blocks of [`DEFAULT_PAGE_SIZE`] pages.
    pub const DEFAULT: Self = Self {
        block_size: DEFAULT_BLOCK_SIZE,
        page_size: DEFAULT_PAGE_SIZE,
    };

    /// Validates and builds a geometry; sizes in bytes.
    ///
    /// Errors with [`Error::InvalidGeometry`] unless both sizes are powers of
    /// two with `page_size <= block_size`, and with [`Error::TooManyPages`]
    /// if a block would have more than [`MAX_PAGES`] pages.
    pub fn new(block_size: u64, page_size: u64) -> Result<Self, Error> {
        let reason = if !block_size.is_power_of_two() {
            Some("block size must be a power of two")
        } else if !page_size.is_power_of_two() {
            Some("page size must be a power of two")
        } else if page_size > block_size {
            Some("page size must not exceed the block size")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::InvalidGeometry {
                block_size,
                page_size,
                reason,
            });
        }
        let pages = block_size / page_size;
        if pages > u64::from(MAX_PAGES) {
            return Err(Error::TooManyPages {
                pages,
                max: MAX_PAGES,
            });
        }
        Ok(Self {
            block_size,
            page_size,
        })
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// Pages in a full block (at most [`MAX_PAGES`]).
    pub fn pages_per_block(&self) -> u32 {
        to_page(self.block_size / self.page_size)
    }

    /// Offset of the block that contains byte `offset`.
    pub fn block_start(&self, offset: u64) -> u64 {
        offset & !(self.block_size - 1)
    }

    /// Blocks in an object of `object_size` bytes.
    pub fn block_count(&self, object_size: u64) -> u64 {
        object_size.div_ceil(self.block_size)
    }

    /// The [`BlockId`] of the block of `object` at `version` that contains
    /// byte `offset`.
    pub fn block_containing(
        &self,
        object: ObjectId,
        version: ObjectVersion,
        offset: u64,
    ) -> BlockId {
        // The geometry's block size is a power of two and `block_start`
        // aligns, so the `BlockId` invariant holds.
        BlockId::new_aligned(object, version, self.block_start(offset), self.block_size)
    }

    /// Bytes of the block at `block_offset` that exist in an object of
    /// `object_size` bytes: `block_size`, less for the last block, 0 at or
    /// past the end. Errors with [`Error::InvalidBlock`] if `block_offset` is
    /// not a multiple of the block size.
    pub fn block_len(&self, block_offset: u64, object_size: u64) -> Result<u64, Error> {
        self.check_aligned(block_offset)?;
        Ok(object_size
            .saturating_sub(block_offset)
            .min(self.block_size))
    }

    /// Pages of the block at `block_offset` in an object of `object_size`
    /// bytes; the last page may be short and a block at or past the end has
    /// 0 pages. Errors like [`block_len`](Self::block_len).
    pub fn page_count(&self, block_offset: u64, object_size: u64) -> Result<u32, Error> {
        let len = self.block_len(block_offset, object_size)?;
        Ok(to_page(len.div_ceil(self.page_size)))
    }

    /// Pages touched by `len` bytes at `offset_in_block`: first page,
    /// last page exclusive. Empty (at the page of `offset_in_block`) when
    /// `len` is 0. Errors with [`Error::RangeNotSatisfiable`] if the bytes
    /// reach past the end of a full block.
    pub fn page_range(&self, offset_in_block: u64, len: u64) -> Result<Range<u32>, Error> {
        let end = offset_in_block
            .checked_add(len)
            .filter(|end| *end <= self.block_size)
            .ok_or(Error::RangeNotSatisfiable {
                start: offset_in_block,
                end: offset_in_block.saturating_add(len),
                size: self.block_size,
            })?;
        Ok(self.pages_of(offset_in_block, end))
    }

    /// Byte range of `pages` within a block of `block_len` bytes (the last
    /// page clipped to the block's end).
    pub fn page_bytes(&self, pages: Range<u32>, block_len: u64) -> Range<u64> {
        let start = (u64::from(pages.start) * self.page_size).min(block_len);
        let end = (u64::from(pages.end) * self.page_size).min(block_len);
        start..end.max(start)
    }

    /// Splits the bytes `range` of an object of `object_size` bytes into
    /// per-block spans, in order, contiguous and covering exactly `range`.
    /// An empty range yields no spans.
    ///
    /// Errors with [`Error::InvalidRange`] if `range.start > range.end` and
    /// [`Error::RangeNotSatisfiable`] if `range.end > object_size` (clamping
    /// HTTP ranges to the object is the caller's business).
    pub fn split_range(&self, range: Range<u64>, object_size: u64) -> Result<Spans, Error> {
        let Range { start, end } = range;
        if start > end {
            return Err(Error::InvalidRange { start, end });
        }
        if end > object_size {
            return Err(Error::RangeNotSatisfiable {
                start,
                end,
                size: object_size,
            });
        }
        Ok(Spans {
            geometry: *self,
            next: start,
            end,
        })
    }

    fn check_aligned(&self, block_offset: u64) -> Result<(), Error> {
        if block_offset & (self.block_size - 1) != 0 {
            return Err(Error::InvalidBlock {
                block_offset,
                block_size: self.block_size,
                reason: "block offset must be a multiple of the block size",
            });
        }
        Ok(())
    }

    /// Pages covering `start..end`, both within one block; empty when the
    /// byte range is.
    fn pages_of(&self, start: u64, end: u64) -> Range<u32> {
        let first = to_page(start / self.page_size);
        if end <= start {
            return first..first;
        }
        first..to_page(end.div_ceil(self.page_size))
    }
}

/// Converts a page index bounded by `MAX_PAGES` (a geometry invariant).
fn to_page(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The part of a byte range that falls in one block.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockSpan {
    /// Offset of the block's first byte in the object.
    pub block_offset: u64,
    /// Offset of the span's first byte within the block.
    pub offset_in_block: u64,
    /// Length of the span in bytes (never 0).
    pub len: u64,
    /// Pages of the block the span touches: first page, last page exclusive.
    pub pages: Range<u32>,
}

impl BlockSpan {
    /// The span's bytes in object coordinates.
    pub fn object_range(&self) -> Range<u64> {
        let start = self.block_offset + self.offset_in_block;
        start..start + self.len
    }

    /// The span's bytes in block coordinates.
    pub fn block_range(&self) -> Range<u64> {
        self.offset_in_block..self.offset_in_block + self.len
    }
}

/// Iterator over the [`BlockSpan`]s of a range, from
/// [`BlockGeometry::split_range`]. Lazy: a range over many blocks costs
/// nothing until iterated.
#[derive(Debug, Clone)]
pub struct Spans {
    geometry: BlockGeometry,
    next: u64,
    end: u64,
}

impl Iterator for Spans {
    type Item = BlockSpan;

    fn next(&mut self) -> Option<BlockSpan> {
        if self.next >= self.end {
            return None;
        }
        let g = &self.geometry;
        let block_offset = g.block_start(self.next);
        let offset_in_block = self.next - block_offset;
        let room = g.block_size - offset_in_block;
        let len = room.min(self.end - self.next);
        self.next += len;
        Some(BlockSpan {
            block_offset,
            offset_in_block,
            len,
            pages: g.pages_of(offset_in_block, offset_in_block + len),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.next >= self.end {
            return (0, Some(0));
        }
        let first = self.geometry.block_start(self.next) / self.geometry.block_size;
        let last = (self.end - 1) / self.geometry.block_size;
        let n = usize::try_from(last - first + 1).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl FusedIterator for Spans {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn g(block: u64, page: u64) -> BlockGeometry {
        BlockGeometry::new(block, page).unwrap()
    }

    #[test]
    fn defaults() {
        let d = BlockGeometry::default();
        assert_eq!(d.block_size(), 256 * 1024 * 1024);
        assert_eq!(d.page_size(), 1024 * 1024);
        assert_eq!(d.pages_per_block(), 256);
        assert_eq!(
            BlockGeometry::new(DEFAULT_BLOCK_SIZE, DEFAULT_PAGE_SIZE),
            Ok(d)
        );
    }

    #[test]
    fn rejects_bad_geometry() {
        for (b, p) in [(0, 1), (1, 0), (3, 1), (4, 3), (4, 8), (0, 0)] {
            assert!(
                matches!(BlockGeometry::new(b, p), Err(Error::InvalidGeometry { .. })),
                "{b} {p}"
            );
        }
        assert_eq!(
            BlockGeometry::new(1 << 21, 1),
            Err(Error::TooManyPages {
                pages: 1 << 21,
                max: MAX_PAGES
            })
        );
        assert!(BlockGeometry::new(1 << 20, 1).is_ok());
        assert!(BlockGeometry::new(1 << 63, 1 << 43).is_ok());
    }

    #[test]
    fn page_count_short_last_block_and_page() {
        let geo = g(1024, 256);
        assert_eq!(geo.page_count(0, 10_000), Ok(4));
        assert_eq!(geo.page_count(9216, 10_000), Ok(4)); // 784 bytes: 3 full + 1 short
        assert_eq!(geo.page_count(9216, 9217), Ok(1));
        assert_eq!(geo.page_count(9216, 9216), Ok(0));
        assert_eq!(geo.page_count(10_240, 10_000), Ok(0));
        assert_eq!(geo.block_len(9216, 10_000), Ok(784));
        assert_eq!(geo.page_count(0, 0), Ok(0));
        assert!(matches!(
            geo.page_count(100, 10_000),
            Err(Error::InvalidBlock { .. })
        ));
        assert_eq!(geo.block_count(10_000), 10);
        assert_eq!(geo.block_count(0), 0);
        assert_eq!(geo.block_count(u64::MAX), 1 << 54);
    }

    #[test]
    fn page_count_past_four_gib_and_near_u64_max() {
        let geo = BlockGeometry::DEFAULT;
        let five_gib = 5u64 << 30;
        assert_eq!(geo.page_count(5u64 << 30, five_gib + 1), Ok(1));
        assert_eq!(geo.page_count(4u64 << 30, five_gib), Ok(256));
        let last = geo.block_start(u64::MAX);
        assert_eq!(last, u64::MAX - (DEFAULT_BLOCK_SIZE - 1));
        assert_eq!(geo.block_len(last, u64::MAX), Ok(DEFAULT_BLOCK_SIZE - 1));
        assert_eq!(geo.page_count(last, u64::MAX), Ok(256));
        assert_eq!(geo.page_count(last, last + 1), Ok(1));
    }

    #[test]
    fn page_range_and_bytes() {
        let geo = g(1024, 256);
        assert_eq!(geo.page_range(0, 1024), Ok(0..4));
        assert_eq!(geo.page_range(255, 2), Ok(0..2));
        assert_eq!(geo.page_range(256, 256), Ok(1..2));
        assert_eq!(geo.page_range(300, 0), Ok(1..1));
        assert!(geo.page_range(1000, 25).is_err());
        assert!(geo.page_range(u64::MAX, 2).is_err());
        assert_eq!(geo.page_bytes(1..3, 1024), 256..768);
        assert_eq!(geo.page_bytes(2..4, 600), 512..600);
        assert_eq!(geo.page_bytes(3..4, 600), 600..600);
    }

    #[test]
    fn split_within_one_block() {
        let geo = g(1024, 256);
        let spans: Vec<_> = geo.split_range(100..300, 10_000).unwrap().collect();
        assert_eq!(
            spans,
            vec![BlockSpan {
                block_offset: 0,
                offset_in_block: 100,
                len: 200,
                pages: 0..2,
            }]
        );
    }

    #[test]
    fn split_across_blocks() {
        let geo = g(1024, 256);
        let it = geo.split_range(1000..3100, 4000).unwrap();
        assert_eq!(it.size_hint(), (4, Some(4)));
        let spans: Vec<_> = it.collect();
        assert_eq!(
            spans,
            vec![
                BlockSpan {
                    block_offset: 0,
                    offset_in_block: 1000,
                    len: 24,
                    pages: 3..4
                },
                BlockSpan {
                    block_offset: 1024,
                    offset_in_block: 0,
                    len: 1024,
                    pages: 0..4
                },
                BlockSpan {
                    block_offset: 2048,
                    offset_in_block: 0,
                    len: 1024,
                    pages: 0..4
                },
                BlockSpan {
                    block_offset: 3072,
                    offset_in_block: 0,
                    len: 28,
                    pages: 0..1
                },
            ]
        );
        assert_eq!(spans[1].object_range(), 1024..2048);
        assert_eq!(spans[3].block_range(), 0..28);
    }

    #[test]
    fn split_rejects_bad_ranges_and_allows_empty() {
        let geo = g(1024, 256);
        assert_eq!(
            geo.split_range(Range { start: 10, end: 5 }, 100).err(),
            Some(Error::InvalidRange { start: 10, end: 5 })
        );
        assert_eq!(
            geo.split_range(0..101, 100).err(),
            Some(Error::RangeNotSatisfiable {
                start: 0,
                end: 101,
                size: 100
            })
        );
        assert_eq!(geo.split_range(100..100, 100).unwrap().count(), 0);
        assert_eq!(geo.split_range(0..0, 0).unwrap().size_hint(), (0, Some(0)));
    }

    #[test]
    fn split_near_u64_max() {
        let geo = BlockGeometry::DEFAULT;
        let size = u64::MAX;
        let start = u64::MAX - DEFAULT_BLOCK_SIZE - 10;
        let spans: Vec<_> = geo.split_range(start..size, size).unwrap().collect();
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].object_range().end, spans[1].object_range().start);
        assert_eq!(spans[1].object_range().end, u64::MAX);
        assert_eq!(spans[1].len, DEFAULT_BLOCK_SIZE - 1);
        assert_eq!(spans[1].pages, 0..256);
        assert_eq!(spans[0].pages, 255..256);
        // The whole u64 space is 2^36 blocks; size_hint does not overflow.
        let all = geo.split_range(0..u64::MAX, u64::MAX).unwrap();
        assert_eq!(all.size_hint().0, 1 << 36);
    }

    #[test]
    fn block_containing_aligns_down() {
        let geo = g(1024, 256);
        let obj = ObjectId::s3("b", "k").unwrap();
        let v = ObjectVersion::new("e").unwrap();
        let id = geo.block_containing(obj, v, 5000);
        assert_eq!(id.block_offset(), 4096);
        assert_eq!(id.block_size(), 1024);
    }
}
