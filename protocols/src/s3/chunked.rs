//! `aws-chunked` request bodies (`Content-Encoding: aws-chunked`), sans-IO: decoding
//! what clients send, and encoding the unsigned-trailer form for an origin.
//!
//! ```text
//! <hex size>[;chunk-signature=<sig>]\r\n<data>\r\n   ... repeated ...
//! 0[;chunk-signature=<sig>]\r\n
//! [x-amz-checksum-<alg>:<base64>\r\n]                 (trailer modes)
//! [x-amz-trailer-signature:<sig>\r\n]                  (signed trailer mode)
//! \r\n
//! ```
//!
//! The decoder yields the object's bytes only (the framing never reaches the object),
//! verifies each chunk signature against the chain seeded by the request's signature,
//! computes the checksum the trailer announces and compares it, and checks the decoded
//! length against `x-amz-decoded-content-length` (a chunk that would go past it is
//! refused at its header). Data is released as it arrives; a caller must commit what it
//! wrote only after [`AwsChunkedDecoder::finish`] succeeds.

use aws_sigv4::sign::v4::calculate_signature;
use sha2::{Digest, Sha256};

use super::sigv4::{EMPTY_SHA256, VerifiedSigV4, constant_time_eq};
use crate::checksum::{ChecksumAlgorithm, Checksummer, checksum};
use crate::error::{Error, ErrorKind, Result};

/// Longest chunk header or trailer line accepted, in bytes.
const MAX_LINE: usize = 4096;
/// Most trailer lines accepted.
const MAX_TRAILERS: usize = 16;

/// How the chunks of a body are signed.
#[derive(Debug, Clone)]
pub enum ChunkSigning {
    /// No chunk signatures (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
    Unsigned,
    /// Signatures may be present but are not checked: a server that does not
    /// authenticate (anonymous access) still has to strip the framing.
    Unverified,
    /// Each chunk signed, chained from the request signature; `trailer` when the trailer
    /// is signed too (`...-PAYLOAD-TRAILER`).
    Signed {
        /// The verified request signature and key.
        seed: VerifiedSigV4,
        /// Whether a trailer signature is expected.
        trailer: bool,
    },
}

/// What a completely decoded body established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedSummary {
    /// Decoded bytes.
    pub decoded_len: u64,
    /// The trailer checksum, verified against the data.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
}

#[derive(Debug)]
enum State {
    /// Reading a chunk header line.
    Header,
    /// Reading `remaining` data bytes of the current chunk.
    Data { remaining: u64 },
    /// Expecting the CRLF after chunk data.
    DataEnd,
    /// Reading trailer lines after the final chunk.
    Trailer,
    /// The body is complete; nothing more may follow.
    Done,
}

/// An incremental `aws-chunked` decoder.
pub struct AwsChunkedDecoder {
    signing: ChunkSigning,
    previous_signature: String,
    trailer_expected: Option<ChecksumAlgorithm>,
    checksum: Option<Checksummer>,
    expected_len: Option<u64>,
    state: State,
    line: Vec<u8>,
    chunk_signature: Option<String>,
    chunk_hash: Option<Sha256>,
    decoded: u64,
    trailers: Vec<(String, String)>,
}

fn incomplete(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::IncompleteBody, msg)
}

impl AwsChunkedDecoder {
    /// Starts decoding.
    ///
    /// `trailer` is the algorithm named by `x-amz-trailer`, if any; `expected_len` is
    /// `x-amz-decoded-content-length`.
    pub fn new(
        signing: ChunkSigning,
        trailer: Option<ChecksumAlgorithm>,
        expected_len: Option<u64>,
    ) -> Self {
        let previous_signature = match &signing {
            ChunkSigning::Signed { seed, .. } => seed.seed_signature.clone(),
            ChunkSigning::Unsigned | ChunkSigning::Unverified => String::new(),
        };
        AwsChunkedDecoder {
            signing,
            previous_signature,
            trailer_expected: trailer,
            checksum: trailer.map(Checksummer::new),
            expected_len,
            state: State::Header,
            line: Vec::new(),
            chunk_signature: None,
            chunk_hash: None,
            decoded: 0,
            trailers: Vec::new(),
        }
    }

    /// Feeds raw body bytes; appends the decoded object bytes to `out`.
    ///
    /// # Errors
    /// [`ErrorKind::IncompleteBody`] for bad framing or a length mismatch,
    /// [`ErrorKind::SignatureDoesNotMatch`] for a bad chunk signature.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        while !input.is_empty() {
            match self.state {
                State::Header | State::Trailer => {
                    let Some(line) = self.take_line(&mut input)? else {
                        break;
                    };
                    if matches!(self.state, State::Header) {
                        self.on_header_line(&line)?;
                    } else {
                        self.on_trailer_line(&line)?;
                    }
                }
                State::Data { remaining } => {
                    let n = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(input.len());
                    let (data, rest) = input.split_at(n);
                    if let Some(h) = &mut self.chunk_hash {
                        h.update(data);
                    }
                    if let Some(c) = &mut self.checksum {
                        c.update(data);
                    }
                    out.extend_from_slice(data);
                    self.decoded += n as u64;
                    input = rest;
                    let remaining = remaining - n as u64;
                    self.state = if remaining == 0 {
                        State::DataEnd
                    } else {
                        State::Data { remaining }
                    };
                }
                State::DataEnd => {
                    let Some(line) = self.take_line(&mut input)? else {
                        break;
                    };
                    if !line.is_empty() {
                        return Err(incomplete("chunk data is not followed by CRLF"));
                    }
                    self.finish_chunk(false)?;
                    self.state = State::Header;
                }
                State::Done => {
                    return Err(incomplete("bytes after the end of an aws-chunked body"));
                }
            }
        }
        Ok(())
    }

    /// Checks that the body ended where it should and returns what it established.
    ///
    /// # Errors
    /// [`ErrorKind::IncompleteBody`] when the body stopped early or the decoded length
    /// differs from `x-amz-decoded-content-length`; [`ErrorKind::BadDigest`] when the
    /// trailer checksum does not match; [`ErrorKind::SignatureDoesNotMatch`] for a bad
    /// trailer signature.
    pub fn finish(mut self) -> Result<ChunkedSummary> {
        if !matches!(self.state, State::Done) {
            return Err(incomplete(
                "the aws-chunked body ended before its final chunk",
            ));
        }
        if let Some(expected) = self.expected_len
            && expected != self.decoded
        {
            return Err(incomplete(format!(
                "x-amz-decoded-content-length is {expected} but the body decoded to {} bytes",
                self.decoded
            )));
        }
        let checksum = match (self.trailer_expected, self.checksum.take()) {
            (Some(alg), Some(computed)) => {
                let sent = self
                    .trailers
                    .iter()
                    .find(|(k, _)| k == alg.header_name())
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| {
                        incomplete(format!("the trailer {} is missing", alg.header_name()))
                    })?;
                let computed = computed.finalize();
                if sent != computed {
                    return Err(Error::new(
                        ErrorKind::BadDigest,
                        format!(
                            "The {} you specified did not match the calculated checksum.",
                            alg.name()
                        ),
                    ));
                }
                Some((alg, computed))
            }
            _ => None,
        };
        Ok(ChunkedSummary {
            decoded_len: self.decoded,
            checksum,
        })
    }

    /// Takes one CRLF-terminated line from `input`, buffering partial lines.
    fn take_line(&mut self, input: &mut &[u8]) -> Result<Option<Vec<u8>>> {
        match input.iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.line.extend_from_slice(&input[..i]);
                *input = &input[i + 1..];
                if self.line.last() != Some(&b'\r') {
                    return Err(incomplete("aws-chunked lines must end with CRLF"));
                }
                self.line.pop();
                if self.line.len() > MAX_LINE {
                    return Err(incomplete("aws-chunked line too long"));
                }
                Ok(Some(std::mem::take(&mut self.line)))
            }
            None => {
                self.line.extend_from_slice(input);
                *input = &[];
                if self.line.len() > MAX_LINE {
                    return Err(incomplete("aws-chunked line too long"));
                }
                Ok(None)
            }
        }
    }

    fn on_header_line(&mut self, line: &[u8]) -> Result<()> {
        let line =
            std::str::from_utf8(line).map_err(|_| incomplete("chunk header is not ASCII"))?;
        let (size, ext) = line.split_once(';').unwrap_or((line, ""));
        let size = u64::from_str_radix(size.trim(), 16)
            .map_err(|_| incomplete(format!("chunk size '{size}' is not hexadecimal")))?;
        let signature = ext
            .trim()
            .strip_prefix("chunk-signature=")
            .map(str::to_owned);
        match (&self.signing, &signature) {
            (ChunkSigning::Signed { .. }, None) => {
                return Err(incomplete(
                    "chunk-signature is missing from a signed aws-chunked body",
                ));
            }
            (ChunkSigning::Unsigned, Some(_)) => {
                return Err(incomplete(
                    "chunk-signature in an unsigned aws-chunked body",
                ));
            }
            _ => {}
        }
        if let Some(expected) = self.expected_len
            && self.decoded.saturating_add(size) > expected
        {
            return Err(incomplete(format!(
                "a chunk of {size} bytes goes past x-amz-decoded-content-length ({expected})"
            )));
        }
        self.chunk_signature = signature;
        self.chunk_hash = matches!(self.signing, ChunkSigning::Signed { .. }).then(Sha256::new);
        if size == 0 {
            // The final chunk: signed bodies sign it like any other, then trailers follow
            // (or, without trailers, the closing empty line).
            self.finish_chunk(true)?;
            self.state = State::Trailer;
        } else {
            self.state = State::Data { remaining: size };
        }
        Ok(())
    }

    fn finish_chunk(&mut self, _final: bool) -> Result<()> {
        let ChunkSigning::Signed { seed, .. } = &self.signing else {
            return Ok(());
        };
        let data_hash = self
            .chunk_hash
            .take()
            .map(|h| hex::encode(h.finalize()))
            .unwrap_or_default();
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256}\n{data_hash}",
            seed.amz_date,
            seed.scope.to_scope_string(),
            self.previous_signature
        );
        let expected = calculate_signature(&seed.signing_key, sts.as_bytes());
        let sent = self.chunk_signature.take().unwrap_or_default();
        if !constant_time_eq(expected.as_bytes(), sent.to_ascii_lowercase().as_bytes()) {
            return Err(Error::new(
                ErrorKind::SignatureDoesNotMatch,
                "a chunk signature does not match",
            ));
        }
        self.previous_signature = expected;
        Ok(())
    }

    fn on_trailer_line(&mut self, line: &[u8]) -> Result<()> {
        if line.is_empty() {
            self.verify_trailer_signature()?;
            self.state = State::Done;
            return Ok(());
        }
        if self.trailers.len() >= MAX_TRAILERS {
            return Err(incomplete("too many trailer lines"));
        }
        let line = std::str::from_utf8(line).map_err(|_| incomplete("trailer is not UTF-8"))?;
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| incomplete("trailer line without ':'"))?;
        self.trailers
            .push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        Ok(())
    }

    fn verify_trailer_signature(&self) -> Result<()> {
        let ChunkSigning::Signed {
            seed,
            trailer: true,
        } = &self.signing
        else {
            return Ok(());
        };
        let mut canonical = String::new();
        let mut sent = None;
        for (name, value) in &self.trailers {
            if name == "x-amz-trailer-signature" {
                sent = Some(value.as_str());
            } else {
                canonical.push_str(&format!("{name}:{value}\n"));
            }
        }
        let sent = sent.ok_or_else(|| incomplete("x-amz-trailer-signature is missing"))?;
        let sts = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{}\n{}",
            seed.amz_date,
            seed.scope.to_scope_string(),
            self.previous_signature,
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let expected = calculate_signature(&seed.signing_key, sts.as_bytes());
        if !constant_time_eq(expected.as_bytes(), sent.to_ascii_lowercase().as_bytes()) {
            return Err(Error::new(
                ErrorKind::SignatureDoesNotMatch,
                "the trailer signature does not match",
            ));
        }
        Ok(())
    }
}

/// Data bytes per chunk an [`AwsChunkedTrailerEncoder`] writes.
pub const ENCODER_CHUNK: usize = 64 * 1024;

/// Frames a body as `aws-chunked` with an unsigned checksum trailer
/// (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`), sans-IO: the way to hand an origin a body whose
/// checksum is only known once the body has streamed through. Chunks are
/// [`ENCODER_CHUNK`] bytes (the last may be short), so the encoded length is known
/// before the first byte ([`encoded_len`](Self::encoded_len)).
pub struct AwsChunkedTrailerEncoder {
    checksum: Checksummer,
    pending: Vec<u8>,
    fed: u64,
    decoded_len: u64,
}

impl AwsChunkedTrailerEncoder {
    /// Starts a body of `decoded_len` bytes whose trailer carries `algorithm`.
    pub fn new(algorithm: ChecksumAlgorithm, decoded_len: u64) -> Self {
        AwsChunkedTrailerEncoder {
            checksum: Checksummer::new(algorithm),
            pending: Vec::with_capacity(ENCODER_CHUNK),
            fed: 0,
            decoded_len,
        }
    }

    /// The encoded size of a `decoded_len`-byte body with `algorithm` in its trailer:
    /// the `Content-Length` to send.
    pub fn encoded_len(algorithm: ChecksumAlgorithm, decoded_len: u64) -> u64 {
        let frame = |n: u64| format!("{n:x}").len() as u64 + 2 + n + 2;
        let chunk = ENCODER_CHUNK as u64;
        let full = decoded_len / chunk;
        let rest = decoded_len % chunk;
        let trailer = algorithm.header_name().len() + 1 + checksum(algorithm, b"").len() + 2;
        full * frame(chunk) + if rest > 0 { frame(rest) } else { 0 } + 3 + trailer as u64 + 2
    }

    /// Feeds body bytes; appends every chunk that filled up to `out`.
    ///
    /// # Errors
    /// [`ErrorKind::IncompleteBody`] when more bytes arrive than announced.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.fed += data.len() as u64;
        if self.fed > self.decoded_len {
            return Err(incomplete("the body is longer than announced"));
        }
        self.checksum.update(data);
        while !data.is_empty() {
            let take = (ENCODER_CHUNK - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == ENCODER_CHUNK {
                self.flush(out);
            }
        }
        Ok(())
    }

    /// Ends the body: the last short chunk, the final chunk and the trailer.
    ///
    /// # Errors
    /// [`ErrorKind::IncompleteBody`] when fewer bytes arrived than announced.
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<()> {
        if self.fed != self.decoded_len {
            return Err(incomplete(format!(
                "the body ended after {} of {} bytes",
                self.fed, self.decoded_len
            )));
        }
        if !self.pending.is_empty() {
            self.flush(out);
        }
        let name = self.checksum.algorithm().header_name();
        let value = self.checksum.finalize();
        out.extend_from_slice(format!("0\r\n{name}:{value}\r\n\r\n").as_bytes());
        Ok(())
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("{:x}\r\n", self.pending.len()).as_bytes());
        out.extend_from_slice(&self.pending);
        out.extend_from_slice(b"\r\n");
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used)]
    fn trailer_encoding_decodes_back_with_its_checksum_and_announced_length() {
        for len in [
            0usize,
            1,
            ENCODER_CHUNK - 1,
            ENCODER_CHUNK,
            3 * ENCODER_CHUNK + 17,
        ] {
            let body: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let alg = ChecksumAlgorithm::Crc32;
            let mut enc = AwsChunkedTrailerEncoder::new(alg, len as u64);
            let mut wire = Vec::new();
            // Uneven pieces, as a network would deliver them.
            for piece in body.chunks(10_007) {
                enc.feed(piece, &mut wire).unwrap();
            }
            enc.finish(&mut wire).unwrap();
            assert_eq!(
                wire.len() as u64,
                AwsChunkedTrailerEncoder::encoded_len(alg, len as u64),
                "{len}"
            );
            let mut dec =
                AwsChunkedDecoder::new(ChunkSigning::Unsigned, Some(alg), Some(len as u64));
            let mut decoded = Vec::new();
            dec.feed(&wire, &mut decoded).unwrap();
            let summary = dec.finish().unwrap();
            assert_eq!(decoded, body);
            assert_eq!(summary.checksum, Some((alg, checksum(alg, &body))));
        }
        let mut short = AwsChunkedTrailerEncoder::new(ChecksumAlgorithm::Sha256, 10);
        short.feed(b"abc", &mut Vec::new()).unwrap();
        assert!(short.finish(&mut Vec::new()).is_err());
        let mut long = AwsChunkedTrailerEncoder::new(ChecksumAlgorithm::Sha256, 2);
        assert!(long.feed(b"abc", &mut Vec::new()).is_err());
    }
    use crate::checksum::checksum;
    use crate::dates::parse_amz_date;
    use crate::s3::sigv4::{RequestParts, parse_authorization, verify};
    use http::HeaderMap;

    const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    /// The seed request of the "signed chunks" example in the S3 documentation.
    fn documented_seed() -> VerifiedSigV4 {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("content-length", "66824"),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
            ),
        ] {
            h.insert(k, v.parse().expect("header"));
        }
        let parts = RequestParts {
            method: "PUT",
            raw_path: "/examplebucket/chunkObject.txt",
            raw_query: "",
            headers: &h,
        };
        let auth = parse_authorization(&h, "")
            .expect("parse")
            .expect("present");
        verify(
            &parts,
            &auth,
            SK,
            parse_amz_date("20130524T000000Z").expect("date"),
        )
        .expect("seed verifies")
    }

    fn documented_body() -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n");
        body.extend(std::iter::repeat_n(b'a', 65536));
        body.extend_from_slice(b"\r\n400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n");
        body.extend(std::iter::repeat_n(b'a', 1024));
        body.extend_from_slice(b"\r\n0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n");
        body
    }

    fn decode_all(
        mut d: AwsChunkedDecoder,
        body: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, ChunkedSummary)> {
        let mut out = Vec::new();
        for piece in body.chunks(step.max(1)) {
            d.feed(piece, &mut out)?;
        }
        Ok((out, d.finish()?))
    }

    #[test]
    fn decodes_the_documented_signed_chunk_example_in_any_split() {
        let body = documented_body();
        assert_eq!(body.len(), 66824, "the example's Content-Length");
        for step in [1, 7, 100, 65536, body.len()] {
            let d = AwsChunkedDecoder::new(
                ChunkSigning::Signed {
                    seed: documented_seed(),
                    trailer: false,
                },
                None,
                Some(66560),
            );
            let (out, summary) = decode_all(d, &body, step).expect("decodes");
            assert_eq!(out.len(), 66560);
            assert!(out.iter().all(|&b| b == b'a'));
            assert_eq!(summary.decoded_len, 66560);
        }
    }

    #[test]
    fn a_tampered_chunk_fails_its_signature() {
        let mut body = documented_body();
        let pos = body.len() - 200;
        body[pos] = b'b';
        let d = AwsChunkedDecoder::new(
            ChunkSigning::Signed {
                seed: documented_seed(),
                trailer: false,
            },
            None,
            Some(66560),
        );
        assert_eq!(
            decode_all(d, &body, 4096).err().map(|e| e.kind()),
            Some(ErrorKind::SignatureDoesNotMatch)
        );
    }

    #[test]
    fn a_chunk_longer_than_the_announced_length_is_refused_at_its_header() {
        // SEC-01: one byte more than x-amz-decoded-content-length, in one chunk.
        let mut d = AwsChunkedDecoder::new(ChunkSigning::Unverified, None, Some(16));
        let mut out = Vec::new();
        let err = d
            .feed(b"11;chunk-signature=00\r\n", &mut out)
            .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::IncompleteBody);
        assert!(out.is_empty(), "no byte of the chunk was released");
    }

    fn unsigned_trailer_body(data: &[u8], trailer_value: &str) -> Vec<u8> {
        let mut body = Vec::new();
        for chunk in data.chunks(1000) {
            body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            body.extend_from_slice(chunk);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(
            format!("0\r\nx-amz-checksum-crc32:{trailer_value}\r\n\r\n").as_bytes(),
        );
        body
    }

    #[test]
    fn unsigned_trailer_checksum_is_verified() {
        let data: Vec<u8> = (0..2500u32).map(|i| (i % 256) as u8).collect();
        let good = checksum(ChecksumAlgorithm::Crc32, &data);
        let body = unsigned_trailer_body(&data, &good);
        let d = AwsChunkedDecoder::new(
            ChunkSigning::Unsigned,
            Some(ChecksumAlgorithm::Crc32),
            Some(2500),
        );
        let (out, summary) = decode_all(d, &body, 333).expect("decodes");
        assert_eq!(out, data, "the framing never ends up in the object");
        assert_eq!(summary.checksum, Some((ChecksumAlgorithm::Crc32, good)));

        let body = unsigned_trailer_body(&data, "AAAAAA==");
        let d = AwsChunkedDecoder::new(
            ChunkSigning::Unsigned,
            Some(ChecksumAlgorithm::Crc32),
            Some(2500),
        );
        assert_eq!(
            decode_all(d, &body, 333).err().map(|e| e.kind()),
            Some(ErrorKind::BadDigest)
        );
    }

    #[test]
    fn framing_errors_are_incomplete_body() {
        let data = b"hello world";
        let good = unsigned_trailer_body(data, &checksum(ChecksumAlgorithm::Crc32, data));
        let new = || {
            AwsChunkedDecoder::new(
                ChunkSigning::Unsigned,
                Some(ChecksumAlgorithm::Crc32),
                Some(11),
            )
        };
        // Truncated.
        assert_eq!(
            decode_all(new(), &good[..good.len() - 3], 5)
                .err()
                .map(|e| e.kind()),
            Some(ErrorKind::IncompleteBody)
        );
        // Wrong decoded length.
        let d = AwsChunkedDecoder::new(
            ChunkSigning::Unsigned,
            Some(ChecksumAlgorithm::Crc32),
            Some(12),
        );
        assert_eq!(
            decode_all(d, &good, 5).err().map(|e| e.kind()),
            Some(ErrorKind::IncompleteBody)
        );
        // Garbage size and bytes after the end.
        assert!(decode_all(new(), b"zz\r\nhello\r\n", 5).is_err());
        let mut extra = good.clone();
        extra.extend_from_slice(b"junk");
        assert!(decode_all(new(), &extra, 5).is_err());
        // Missing trailer.
        assert!(decode_all(new(), b"b\r\nhello world\r\n0\r\n\r\n", 5).is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_input(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), step in 1usize..50) {
            let d = AwsChunkedDecoder::new(ChunkSigning::Unsigned, Some(ChecksumAlgorithm::Crc32), None);
            let _ = decode_all(d, &body, step);
        }
    }
}
