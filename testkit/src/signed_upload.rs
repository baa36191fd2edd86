//! Signed `aws-chunked` uploads built by aws-sigv4 itself (seed signature, `sign_chunk`,
//! `sign_trailer`), and the ways to spoil one after it was signed.
//!
//! One builder for every server that verifies uploads: the origin stub's tests send
//! these straight to the stub, the gateway's send the same requests through the gateway
//! and then look at the stub's store. So both are held to one suite, written against an
//! implementation neither shares code with.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4::{self, sign_chunk, sign_trailer};
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_runtime_api::http::Headers;
use bytes::Bytes;
use talon_protocols::checksum::{ChecksumAlgorithm, checksum};
use talon_protocols::uri_encoding::encode_path;

/// The data size of every chunk but the last, in bytes.
pub const CHUNK: usize = 8192;
/// The trailer every trailer mode announces.
pub const CRC_TRAILER: &str = "x-amz-checksum-crc32";

/// Where uploads go and who signs them.
#[derive(Debug, Clone)]
pub struct UploadTarget {
    /// `http://HOST:PORT` of the S3 endpoint.
    pub endpoint: String,
    /// The bucket uploads go to.
    pub bucket: String,
    /// Access key id.
    pub access_key: String,
    /// Secret.
    pub secret_key: String,
    /// Signing region.
    pub region: String,
}

/// How the body is framed and signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: signed chunks, no trailer.
    Signed,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks, signed CRC32 trailer.
    SignedTrailer,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: plain chunks, CRC32 trailer.
    UnsignedTrailer,
}

impl Mode {
    /// Whether chunks carry signatures.
    pub fn signed(self) -> bool {
        self != Mode::UnsignedTrailer
    }

    /// Whether a trailer follows the final chunk.
    pub fn trailer(self) -> bool {
        self != Mode::Signed
    }
}

/// Ways to spoil an otherwise valid upload after it was signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spoil {
    /// Nothing: a valid upload.
    None,
    /// Flip a bit in the second chunk's data.
    FlipDataByte,
    /// Send a trailer checksum that does not match the data (signed correctly, if the
    /// mode signs trailers).
    WrongChecksum,
    /// Change the trailer checksum after the trailer was signed.
    AlterSignedTrailer,
    /// Claim one byte more in `x-amz-decoded-content-length` (the header is signed).
    LongerDecodedLength,
    /// Claim one byte less in `x-amz-decoded-content-length` (the header is signed): the
    /// body is one byte longer than announced.
    ShorterDecodedLength,
    /// SEC-01 of the security review: the signed headers are reused with a body of one
    /// chunk, one byte longer than `x-amz-decoded-content-length`, under a bogus chunk
    /// signature, and nothing after it (not even the chunk's CRLF, so a verifier that
    /// checks the signature at the chunk's end never gets there).
    ForgedLongChunk,
    /// Swap the first two (equally long) chunks, signatures included.
    SwapChunks,
    /// Stop the body `n` bytes before its end (Content-Length stays honest).
    Cut(usize),
    /// Append bytes after the end of the aws-chunked body.
    Garbage,
}

/// Every spoilt upload a verifying server must refuse, with the S3 status and error
/// code it answers; each leaves the origin's store exactly as it was.
pub const REFUSALS: &[(Mode, Spoil, u16, &str)] = &[
    (
        Mode::Signed,
        Spoil::FlipDataByte,
        403,
        "SignatureDoesNotMatch",
    ),
    (
        Mode::SignedTrailer,
        Spoil::FlipDataByte,
        403,
        "SignatureDoesNotMatch",
    ),
    (
        Mode::Signed,
        Spoil::SwapChunks,
        403,
        "SignatureDoesNotMatch",
    ),
    (
        Mode::SignedTrailer,
        Spoil::AlterSignedTrailer,
        403,
        "SignatureDoesNotMatch",
    ),
    (Mode::SignedTrailer, Spoil::WrongChecksum, 400, "BadDigest"),
    (
        Mode::UnsignedTrailer,
        Spoil::WrongChecksum,
        400,
        "BadDigest",
    ),
    (Mode::UnsignedTrailer, Spoil::FlipDataByte, 400, "BadDigest"),
    (
        Mode::Signed,
        Spoil::LongerDecodedLength,
        400,
        "IncompleteBody",
    ),
    (
        Mode::UnsignedTrailer,
        Spoil::LongerDecodedLength,
        400,
        "IncompleteBody",
    ),
    (
        Mode::Signed,
        Spoil::ShorterDecodedLength,
        400,
        "IncompleteBody",
    ),
    (
        Mode::SignedTrailer,
        Spoil::ShorterDecodedLength,
        400,
        "IncompleteBody",
    ),
    (
        Mode::UnsignedTrailer,
        Spoil::ShorterDecodedLength,
        400,
        "IncompleteBody",
    ),
    (Mode::Signed, Spoil::ForgedLongChunk, 400, "IncompleteBody"),
    // Cut inside the last data chunk, before the final chunk, and the closing CRLF.
    (Mode::Signed, Spoil::Cut(150), 400, "IncompleteBody"),
    (Mode::SignedTrailer, Spoil::Cut(2), 400, "IncompleteBody"),
    (Mode::UnsignedTrailer, Spoil::Cut(2), 400, "IncompleteBody"),
    (Mode::UnsignedTrailer, Spoil::Cut(40), 400, "IncompleteBody"),
    (Mode::Signed, Spoil::Garbage, 400, "IncompleteBody"),
];

/// A built request: what to send, unsent.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The object's URL.
    pub url: String,
    /// Every header, signed ones included (not `host`).
    pub headers: Vec<(String, String)>,
    /// The framed body.
    pub body: Vec<u8>,
}

fn params<'a>(
    identity: &'a Identity,
    region: &'a str,
    now: SystemTime,
) -> v4::SigningParams<'a, SigningSettings> {
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    v4::SigningParams::builder()
        .identity(identity)
        .region(region)
        .name("s3")
        .time(now)
        .settings(settings)
        .build()
        .expect("signing parameters")
}

/// Builds a signed `aws-chunked` PUT of `payload` to `key`, then spoils it as asked.
///
/// # Panics
/// On a target URL aws-sigv4 cannot sign (a test bug).
pub fn build(target: &UploadTarget, key: &str, payload: &[u8], mode: Mode, spoil: Spoil) -> Upload {
    let url = format!(
        "{}/{}/{}",
        target.endpoint.trim_end_matches('/'),
        target.bucket,
        encode_path(key)
    );
    let host = target
        .endpoint
        .split_once("://")
        .map_or(target.endpoint.as_str(), |(_, h)| h)
        .trim_end_matches('/')
        .to_owned();
    let decoded_len = match spoil {
        Spoil::LongerDecodedLength => payload.len() + 1,
        Spoil::ShorterDecodedLength => payload.len().saturating_sub(1),
        _ => payload.len(),
    };
    let mut headers: Vec<(String, String)> = vec![
        ("host".into(), host),
        ("content-encoding".into(), "aws-chunked".into()),
        (
            "x-amz-decoded-content-length".into(),
            decoded_len.to_string(),
        ),
        ("content-type".into(), "application/octet-stream".into()),
    ];
    if mode.trailer() {
        headers.push(("x-amz-trailer".into(), CRC_TRAILER.into()));
    }
    let identity: Identity = Credentials::new(
        &target.access_key,
        &target.secret_key,
        None,
        None,
        "signed-upload",
    )
    .into();
    let now = SystemTime::now();
    let signable_body = match mode {
        Mode::Signed => SignableBody::Precomputed("STREAMING-AWS4-HMAC-SHA256-PAYLOAD".into()),
        Mode::SignedTrailer => SignableBody::StreamingSignedPayloadTrailer,
        Mode::UnsignedTrailer => SignableBody::StreamingUnsignedPayloadTrailer,
    };
    let request = SignableRequest::new(
        "PUT",
        &url,
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        signable_body,
    )
    .expect("signable");
    let (instructions, seed) = sign(request, &params(&identity, &target.region, now).into())
        .expect("signed")
        .into_parts();
    let (signed_headers, _) = instructions.into_parts();
    headers.extend(
        signed_headers
            .iter()
            .map(|h| (h.name().to_owned(), h.value().to_owned())),
    );
    headers.retain(|(k, _)| k != "host");

    if spoil == Spoil::ForgedLongChunk {
        let mut body = format!(
            "{:x};chunk-signature={}\r\n",
            decoded_len + 1,
            "0".repeat(64)
        )
        .into_bytes();
        body.extend(std::iter::repeat_n(b'X', decoded_len + 1));
        return Upload { url, headers, body };
    }

    let params = params(&identity, &target.region, now);
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut previous = seed;
    for data in payload.chunks(CHUNK).chain(std::iter::once(&[][..])) {
        let mut framed = format!("{:x}", data.len()).into_bytes();
        if mode.signed() {
            let sig = sign_chunk(&Bytes::copy_from_slice(data), &previous, &params)
                .expect("chunk signature")
                .into_parts()
                .1;
            framed.extend_from_slice(format!(";chunk-signature={sig}").as_bytes());
            previous = sig;
        }
        framed.extend_from_slice(b"\r\n");
        if !data.is_empty() {
            framed.extend_from_slice(data);
            framed.extend_from_slice(b"\r\n");
        }
        chunks.push(framed);
    }
    match spoil {
        Spoil::FlipDataByte => {
            let second = &mut chunks[1];
            let at = second.len() - 100;
            second[at] ^= 0x01;
        }
        Spoil::SwapChunks => chunks.swap(0, 1),
        _ => {}
    }
    let mut body: Vec<u8> = chunks.concat();
    if mode.trailer() {
        let signed_value = if spoil == Spoil::WrongChecksum {
            checksum(ChecksumAlgorithm::Crc32, b"something else")
        } else {
            checksum(ChecksumAlgorithm::Crc32, payload)
        };
        let sent_value = if spoil == Spoil::AlterSignedTrailer {
            checksum(ChecksumAlgorithm::Crc32, b"tampered")
        } else {
            signed_value.clone()
        };
        body.extend_from_slice(format!("{CRC_TRAILER}:{sent_value}\r\n").as_bytes());
        if mode.signed() {
            let mut trailer = Headers::new();
            trailer.insert(CRC_TRAILER, signed_value);
            let sig = sign_trailer(&trailer, &previous, &params)
                .expect("trailer signature")
                .into_parts()
                .1;
            body.extend_from_slice(format!("x-amz-trailer-signature:{sig}\r\n").as_bytes());
        }
    }
    body.extend_from_slice(b"\r\n");
    match spoil {
        Spoil::Cut(n) => body.truncate(body.len() - n),
        Spoil::Garbage => body.extend_from_slice(b"5\r\nextra\r\n"),
        _ => {}
    }
    Upload { url, headers, body }
}

/// Printable test payloads (several chunks and a short tail), unique per tag.
pub fn payload(len: usize, tag: u8) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i * 7 + usize::from(tag) * 3 + i / 13) % 26) as u8)
        .collect()
}

/// What a server answered.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body as text (an S3 error document for refusals).
    pub body: String,
}

impl Answer {
    /// The `<Code>` of an S3 error document.
    pub fn code(&self) -> Option<&str> {
        let start = self.body.find("<Code>")? + "<Code>".len();
        let end = self.body[start..].find("</Code>")? + start;
        Some(&self.body[start..end])
    }
}

/// Sends an upload. With `pieces`, the body goes out in pieces of that many bytes, one
/// write each, so framing lines and signatures arrive split across reads (and the byte
/// past the announced length arrives after the rest, the order SEC-01 needs); the
/// Content-Length stays exact either way.
///
/// # Panics
/// When the request cannot be sent at all (a test bug or a dead server).
pub async fn send(http: &reqwest::Client, up: Upload, pieces: Option<usize>) -> Answer {
    let mut req = http.put(&up.url);
    for (k, v) in &up.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = match pieces {
        None => req.body(up.body),
        Some(n) => {
            let len = up.body.len();
            let pieces: Vec<Bytes> = up
                .body
                .chunks(n.max(1))
                .map(Bytes::copy_from_slice)
                .collect();
            let stream = futures_util::stream::unfold(pieces.into_iter(), |mut rest| async move {
                let next = rest.next()?;
                // Let the server read what came before on its own.
                tokio::task::yield_now().await;
                Some((Ok::<_, std::io::Error>(next), rest))
            });
            req.header("content-length", len)
                .body(reqwest::Body::wrap_stream(stream))
        }
    };
    let resp = req.send().await.expect("the server answers");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    Answer {
        status,
        headers,
        body,
    }
}
