//! Upload verification, once for every server that accepts uploads (the gateway's fronts,
//! which stream the verified bytes on to the origin, and the origin stub, which writes
//! them to a staging file): what a client claims about a body ([`UploadClaims`]), and
//! checking the body against it as it passes ([`UploadVerifier`]).
//!
//! The verifier is runtime-free: a server feeds it the body's bytes as they arrive, uses
//! the decoded bytes it gives back, and commits only when [`UploadVerifier::finish`]
//! says every check passed — the payload hash the signature covers, each chunk and
//! trailer signature and the trailer checksum of an `aws-chunked` body, `Content-MD5`, a
//! flexible checksum, and the announced length. A body that is longer is refused at the
//! first byte too many.

use http::HeaderMap;
use md5::{Digest as _, Md5};
use sha2::Sha256;

use crate::answer::header;
use crate::checksum::{ChecksumAlgorithm, Checksummer};
use crate::s3::chunked::{AwsChunkedDecoder, ChunkSigning};
use crate::s3::sigv4::{PayloadMode, VerifiedSigV4};
use crate::{Error, ErrorKind, Result};

mod stream;
pub use stream::{UploadOutcome, Verified, VerifyingStream, settle};

/// What a client claims about its upload's body.
#[derive(Debug, Default, Clone)]
pub struct UploadClaims {
    /// `aws-chunked` framing: how chunks are signed, the trailer checksum announced, and
    /// the decoded length announced (`x-amz-decoded-content-length`).
    pub chunked: Option<(ChunkSigning, Option<ChecksumAlgorithm>, Option<u64>)>,
    /// The hex SHA-256 of the bytes on the wire that the signature covers
    /// (`x-amz-content-sha256`), checked only on a verified signed request.
    pub sha256: Option<String>,
    /// A flexible checksum from a header: algorithm and base64 value.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
    /// `Content-MD5` (base64).
    pub content_md5: Option<String>,
    /// The decoded length announced: `x-amz-decoded-content-length` for an
    /// `aws-chunked` body, `Content-Length` otherwise.
    pub announced_len: Option<u64>,
}

impl UploadClaims {
    /// The claims of an S3 upload (PutObject, UploadPart) from its headers. `signature`
    /// is the request's verified SigV4 signature, if it had one: chunk signatures and
    /// the payload hash are checked against it; an anonymous server still strips the
    /// `aws-chunked` framing.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for an unknown payload mode or trailer, or a
    /// length that is not a number; [`ErrorKind::MissingContentLength`] when a plain
    /// body has no `Content-Length`.
    pub fn s3(headers: &HeaderMap, signature: Option<&VerifiedSigV4>) -> Result<UploadClaims> {
        let mode = match header(headers, "x-amz-content-sha256") {
            Some(v) => PayloadMode::parse(v)?,
            None => PayloadMode::Unsigned,
        };
        let chunked = mode.is_chunked()
            || header(headers, "content-encoding")
                .is_some_and(|v| v.split(',').any(|p| p.trim() == "aws-chunked"));
        let trailer = match header(headers, "x-amz-trailer") {
            Some(t) => Some(ChecksumAlgorithm::parse(t).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("unsupported trailer '{t}'"),
                )
            })?),
            None => None,
        };
        let decoded_len = number(headers, "x-amz-decoded-content-length")?;
        let content_len = number(headers, "content-length")?;
        if content_len.is_none() && !chunked {
            return Err(Error::new(
                ErrorKind::MissingContentLength,
                "You must provide the Content-Length HTTP header.",
            ));
        }
        let signing = match (signature, &mode) {
            (Some(seed), PayloadMode::StreamingSigned) => ChunkSigning::Signed {
                seed: seed.clone(),
                trailer: false,
            },
            (Some(seed), PayloadMode::StreamingSignedTrailer) => ChunkSigning::Signed {
                seed: seed.clone(),
                trailer: true,
            },
            (_, PayloadMode::StreamingUnsignedTrailer) => ChunkSigning::Unsigned,
            _ => ChunkSigning::Unverified,
        };
        Ok(UploadClaims {
            chunked: chunked.then_some((signing, trailer, decoded_len)),
            sha256: match (signature, mode) {
                (Some(_), PayloadMode::Sha256(hash)) => Some(hash),
                _ => None,
            },
            checksum: ChecksumAlgorithm::ALL.into_iter().find_map(|alg| {
                header(headers, alg.header_name()).map(|v| (alg, v.trim().to_owned()))
            }),
            content_md5: header(headers, "content-md5").map(str::to_owned),
            announced_len: if chunked { decoded_len } else { content_len },
        })
    }

    /// The claims of an Azure upload (Put Blob, Put Block): `Content-MD5` and
    /// `Content-Length`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for a `Content-Length` that is not a number.
    pub fn azure(headers: &HeaderMap) -> Result<UploadClaims> {
        Ok(UploadClaims {
            content_md5: header(headers, "content-md5").map(str::to_owned),
            announced_len: number(headers, "content-length")?,
            ..UploadClaims::default()
        })
    }
}

fn number(headers: &HeaderMap, name: &str) -> Result<Option<u64>> {
    header(headers, name)
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{name} is not a number"),
                )
            })
        })
        .transpose()
}

/// What a verified upload turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedUpload {
    /// Decoded bytes.
    pub len: u64,
    /// MD5 of the decoded bytes.
    pub md5: [u8; 16],
    /// The verified full-object checksum, from a header or a trailer.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
}

impl VerifiedUpload {
    /// The MD5 in hex (an S3 ETag's form).
    pub fn md5_hex(&self) -> String {
        hex::encode(self.md5)
    }

    /// The MD5 in base64 (`Content-MD5`'s form).
    pub fn md5_base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(self.md5)
    }
}

/// Checks a body against its [`UploadClaims`] as it passes.
pub struct UploadVerifier {
    decoder: Option<AwsChunkedDecoder>,
    sha256: Option<(Sha256, String)>,
    checksum: Option<(Checksummer, String)>,
    content_md5: Option<String>,
    md5: Md5,
    len: u64,
    announced: Option<u64>,
    limit: u64,
}

impl UploadVerifier {
    /// Starts verifying a body with these claims. `announced` is the decoded length the
    /// server holds the client to (the claims' own when `None`); `limit` is the most
    /// decoded bytes accepted at all.
    pub fn new(claims: UploadClaims, announced: Option<u64>, limit: u64) -> UploadVerifier {
        UploadVerifier {
            announced: announced.or(claims.announced_len),
            decoder: claims
                .chunked
                .map(|(signing, trailer, len)| AwsChunkedDecoder::new(signing, trailer, len)),
            sha256: claims.sha256.map(|h| (Sha256::new(), h)),
            checksum: claims.checksum.map(|(alg, v)| (Checksummer::new(alg), v)),
            content_md5: claims.content_md5,
            md5: Md5::new(),
            len: 0,
            limit,
        }
    }

    /// Feeds bytes as they came off the wire. Returns the object bytes they carry: the
    /// same bytes for a plain body, the decoded ones (possibly none) for `aws-chunked`.
    ///
    /// # Errors
    /// [`ErrorKind::IncompleteBody`] for bad framing or more bytes than announced,
    /// [`ErrorKind::EntityTooLarge`] past the limit,
    /// [`ErrorKind::SignatureDoesNotMatch`] for a bad chunk signature.
    pub fn absorb(&mut self, wire: bytes::Bytes) -> Result<bytes::Bytes> {
        if let Some((h, _)) = &mut self.sha256 {
            // The signed hash covers the bytes on the wire.
            h.update(&wire);
        }
        let decoded = match &mut self.decoder {
            Some(d) => {
                let mut out = Vec::new();
                d.feed(&wire, &mut out)?;
                bytes::Bytes::from(out)
            }
            None => wire,
        };
        self.len += decoded.len() as u64;
        if let Some(announced) = self.announced
            && self.len > announced
        {
            return Err(Error::new(
                ErrorKind::IncompleteBody,
                format!("The request body is longer than the {announced} bytes announced."),
            ));
        }
        if self.len > self.limit {
            return Err(Error::new(
                ErrorKind::EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed size",
            ));
        }
        self.md5.update(&decoded);
        if let Some((c, _)) = &mut self.checksum {
            c.update(&decoded);
        }
        Ok(decoded)
    }

    /// Every check that needs the whole body, once it has ended.
    ///
    /// # Errors
    /// The first check that failed: [`ErrorKind::IncompleteBody`] (framing, or fewer
    /// bytes than announced), [`ErrorKind::ContentSha256Mismatch`],
    /// [`ErrorKind::InvalidDigest`], [`ErrorKind::BadDigest`], or the trailer's own.
    pub fn finish(self) -> Result<VerifiedUpload> {
        let mut checksum_out = match self.decoder {
            Some(decoder) => decoder.finish()?.checksum,
            None => None,
        };
        if let Some((hasher, expected)) = self.sha256
            && hex::encode(hasher.finalize()) != expected
        {
            return Err(Error::new(
                ErrorKind::ContentSha256Mismatch,
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            ));
        }
        let md5: [u8; 16] = self.md5.finalize().into();
        if let Some(sent) = &self.content_md5 {
            use base64::Engine;
            let sent = base64::engine::general_purpose::STANDARD
                .decode(sent.trim())
                .ok()
                .filter(|d| d.len() == 16)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidDigest,
                        "The Content-MD5 you specified was invalid.",
                    )
                })?;
            if sent != md5 {
                return Err(Error::new(
                    ErrorKind::BadDigest,
                    "The Content-MD5 you specified did not match what we received.",
                ));
            }
        }
        if let Some((hasher, expected)) = self.checksum {
            let alg = hasher.algorithm();
            let computed = hasher.finalize();
            if computed != expected {
                return Err(Error::new(
                    ErrorKind::BadDigest,
                    format!(
                        "The {} you specified did not match the calculated checksum.",
                        alg.name()
                    ),
                ));
            }
            checksum_out = Some((alg, computed));
        }
        if let Some(announced) = self.announced
            && self.len != announced
        {
            return Err(Error::new(
                ErrorKind::IncompleteBody,
                format!(
                    "You did not provide the number of bytes announced: {} of {announced}.",
                    self.len
                ),
            ));
        }
        Ok(VerifiedUpload {
            len: self.len,
            md5,
            checksum: checksum_out,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use bytes::Bytes;
    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn verify(claims: UploadClaims, parts: &[&'static [u8]]) -> Result<VerifiedUpload> {
        let mut v = UploadVerifier::new(claims, None, 1 << 20);
        for p in parts {
            v.absorb(Bytes::from_static(p))?;
        }
        v.finish()
    }

    #[test]
    fn a_plain_body_with_its_md5_verifies() {
        // MD5("hello world") = 5eb63bbbe01eeed093cb22bb8f5acdc3
        let claims = UploadClaims::s3(
            &headers(&[
                ("content-length", "11"),
                ("content-md5", "XrY7u+Ae7tCTyyK7j1rNww=="),
            ]),
            None,
        )
        .unwrap();
        let v = verify(claims, &[b"hello ", b"world"]).unwrap();
        assert_eq!(v.len, 11);
        assert_eq!(v.md5_hex(), "5eb63bbbe01eeed093cb22bb8f5acdc3");
        assert_eq!(v.md5_base64(), "XrY7u+Ae7tCTyyK7j1rNww==");
    }

    #[test]
    fn longer_shorter_and_tampered_bodies_are_refused() {
        let claims = || UploadClaims::s3(&headers(&[("content-length", "5")]), None).unwrap();
        let e = verify(claims(), &[b"hello!"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::IncompleteBody);
        let e = verify(claims(), &[b"hell"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::IncompleteBody);
        let md5 = UploadClaims {
            content_md5: Some("XrY7u+Ae7tCTyyK7j1rNww==".into()),
            ..UploadClaims::azure(&headers(&[("content-length", "11")])).unwrap()
        };
        let e = verify(md5, &[b"hello worle"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadDigest);
        let bad = UploadClaims {
            content_md5: Some("not base64!".into()),
            ..UploadClaims::azure(&headers(&[("content-length", "1")])).unwrap()
        };
        assert_eq!(
            verify(bad, &[b"x"]).unwrap_err().kind(),
            ErrorKind::InvalidDigest
        );
        // Valid base64, but not the 16 bytes of an MD5.
        let short = UploadClaims {
            content_md5: Some("AAAA".into()),
            ..UploadClaims::azure(&headers(&[("content-length", "1")])).unwrap()
        };
        assert_eq!(
            verify(short, &[b"x"]).unwrap_err().kind(),
            ErrorKind::InvalidDigest
        );
    }

    #[test]
    fn the_limit_holds_without_an_announced_length() {
        let claims = UploadClaims {
            chunked: Some((ChunkSigning::Unverified, None, None)),
            ..UploadClaims::default()
        };
        let mut v = UploadVerifier::new(claims, None, 4);
        let e = v.absorb(Bytes::from_static(b"5\r\nhello\r\n")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::EntityTooLarge);
    }

    #[test]
    fn aws_chunked_framing_is_stripped_and_its_length_checked() {
        let claims = UploadClaims::s3(
            &headers(&[
                ("content-encoding", "aws-chunked"),
                ("x-amz-decoded-content-length", "5"),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(claims.announced_len, Some(5));
        let mut v = UploadVerifier::new(claims, None, 1 << 20);
        let decoded = v
            .absorb(Bytes::from_static(b"5\r\nhello\r\n0\r\n\r\n"))
            .unwrap();
        assert_eq!(&decoded[..], b"hello");
        assert_eq!(v.finish().unwrap().len, 5);
    }

    #[test]
    fn a_plain_body_needs_a_length_and_lengths_are_numbers() {
        let e = UploadClaims::s3(&HeaderMap::new(), None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingContentLength);
        let e = UploadClaims::s3(
            &headers(&[
                ("content-encoding", "aws-chunked"),
                ("x-amz-decoded-content-length", "x"),
            ]),
            None,
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}
