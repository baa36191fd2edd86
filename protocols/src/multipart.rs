//! S3's rules for completing a multipart upload, once for every backend that keeps
//! uploads (the origin stub's store, the gateway's mapping onto Azure blocks): what a
//! CompleteMultipartUpload may list, and the error each violation is.

use crate::{Error, ErrorKind, Result};

/// Smallest size of a part other than the last, as S3 enforces at completion.
pub const MIN_PART_SIZE: u64 = 5 << 20;

/// Checks the parts a CompleteMultipartUpload lists (number, entity tag), in the order
/// listed, against what the upload holds: `stored(number, etag)` gives the size of part
/// `number` if it was uploaded with that entity tag. Gives the listed numbers.
///
/// # Errors
/// [`ErrorKind::MalformedXml`] for no parts, [`ErrorKind::InvalidPartOrder`] unless the
/// numbers ascend, [`ErrorKind::InvalidPart`] for a part not uploaded or a tag it never
/// had, [`ErrorKind::EntityTooSmall`] for a part other than the last under
/// [`MIN_PART_SIZE`].
pub fn check_completion(
    listed: &[(u32, String)],
    stored: impl Fn(u32, &str) -> Option<u64>,
) -> Result<Vec<u32>> {
    if listed.is_empty() {
        return Err(Error::new(
            ErrorKind::MalformedXml,
            "You must specify at least one part",
        ));
    }
    if listed.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(Error::new(
            ErrorKind::InvalidPartOrder,
            "The list of parts was not in ascending order. Parts must be ordered by part number.",
        ));
    }
    let mut out = Vec::with_capacity(listed.len());
    for (i, (number, etag)) in listed.iter().enumerate() {
        let size = stored(*number, etag).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidPart,
                "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
            )
        })?;
        if i + 1 < listed.len() && size < MIN_PART_SIZE {
            return Err(Error::new(
                ErrorKind::EntityTooSmall,
                "Your proposed upload is smaller than the minimum allowed size",
            ));
        }
        out.push(*number);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_rule_has_its_error() {
        let stored = |n: u32, etag: &str| match (n, etag) {
            (1, "\"a\"") => Some(MIN_PART_SIZE),
            (2, "\"b\"") => Some(1),
            (3, "\"c\"") => Some(1),
            _ => None,
        };
        let p = |n: u32, e: &str| (n, format!("\"{e}\""));
        assert_eq!(
            check_completion(&[p(1, "a"), p(2, "b")], stored).unwrap(),
            [1, 2]
        );
        let kind = |l: &[(u32, String)]| check_completion(l, stored).unwrap_err().kind();
        assert_eq!(kind(&[]), ErrorKind::MalformedXml);
        assert_eq!(kind(&[p(2, "b"), p(1, "a")]), ErrorKind::InvalidPartOrder);
        assert_eq!(kind(&[p(1, "a"), p(1, "a")]), ErrorKind::InvalidPartOrder);
        assert_eq!(kind(&[p(1, "b")]), ErrorKind::InvalidPart);
        assert_eq!(kind(&[p(1, "a"), p(4, "a")]), ErrorKind::InvalidPart);
        assert_eq!(kind(&[p(2, "b"), p(3, "c")]), ErrorKind::EntityTooSmall);
    }
}
