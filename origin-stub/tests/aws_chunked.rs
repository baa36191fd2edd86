//! `aws-chunked` uploads over real HTTP to an authenticated stub, framed and signed by
//! aws-sigv4 itself (seed signature, `sign_chunk`, `sign_trailer`), so the stub's decoder
//! is checked against an implementation it does not share code with.
//!
//! What a user relies on: the stored object is exactly the decoded payload (the framing
//! never reaches it), and a bad upload — tampered data, a wrong checksum, a cut body —
//! is refused with the right S3 error and changes nothing that was stored before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
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
use futures_util::StreamExt;
use md5::Digest as _;
use talon_origin_stub::{RunningStub, StubConfig};
use talon_protocols::checksum::{ChecksumAlgorithm, checksum};
use talon_protocols::origin::{OriginClient, OriginConfig};
use talon_protocols::s3::sigv4::S3Credentials;
use talon_protocols::uri_encoding::encode_path;

const ACCESS_KEY: &str = "AKIACHUNKEDTEST";
const SECRET_KEY: &str = "chunked/secret+key";
const REGION: &str = "us-east-1";
const BUCKET: &str = "chunked";
const CHUNK: usize = 8192;

struct Env {
    stub: RunningStub,
    origin: OriginClient,
    http: reqwest::Client,
}

async fn env() -> Env {
    let stub = talon_origin_stub::start(StubConfig {
        s3_credentials: BTreeMap::from([(ACCESS_KEY.to_owned(), SECRET_KEY.to_owned())]),
        ..StubConfig::default()
    })
    .await
    .expect("stub starts");
    std::fs::create_dir_all(stub.data_dir().join(BUCKET)).unwrap();
    let origin = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: REGION.into(),
        credentials: Some(S3Credentials {
            access_key: ACCESS_KEY.into(),
            secret_key: SECRET_KEY.into(),
            session_token: None,
        }),
        virtual_hosted: false,
    })
    .unwrap();
    Env {
        stub,
        origin,
        http: reqwest::Client::new(),
    }
}

impl Env {
    /// The stored bytes of `key`, read with a signed GET.
    async fn stored(&self, key: &str) -> Vec<u8> {
        let resp = self.origin.get(BUCKET, key, None, None).await.unwrap();
        let mut body = resp.body;
        let mut out = Vec::new();
        while let Some(c) = body.next().await {
            out.extend_from_slice(&c.unwrap());
        }
        assert_eq!(resp.info.size, out.len() as u64);
        out
    }

    async fn send(&self, up: Upload) -> Answer {
        let mut req = self.http.put(&up.url);
        for (k, v) in &up.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = match up.pieces {
            None => req.body(up.body),
            Some(n) => {
                // The same bytes in small pieces, so framing lines and signatures arrive
                // split across reads; Content-Length stays exact.
                let len = up.body.len();
                let pieces: Vec<Result<Bytes, std::io::Error>> = up
                    .body
                    .chunks(n)
                    .map(|c| Ok(Bytes::copy_from_slice(c)))
                    .collect();
                req.header("content-length", len)
                    .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                        pieces,
                    )))
            }
        };
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.text().await.unwrap();
        Answer {
            status,
            headers,
            body,
        }
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn code(&self) -> Option<&str> {
        let start = self.body.find("<Code>")? + "<Code>".len();
        let end = self.body[start..].find("</Code>")? + start;
        Some(&self.body[start..end])
    }

    fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code()),
            (status, Some(code)),
            "{}",
            self.body
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: signed chunks, no trailer.
    Signed,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks, signed CRC32 trailer.
    SignedTrailer,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: plain chunks, CRC32 trailer.
    UnsignedTrailer,
}

impl Mode {
    fn signed(self) -> bool {
        self != Mode::UnsignedTrailer
    }

    fn trailer(self) -> bool {
        self != Mode::Signed
    }
}

/// Ways to spoil an otherwise valid upload after it was signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spoil {
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
    /// Swap the first two (equally long) chunks, signatures included.
    SwapChunks,
    /// Stop the body `n` bytes before its end (Content-Length stays honest).
    Cut(usize),
    /// Append bytes after the end of the aws-chunked body.
    Garbage,
}

struct Upload {
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    pieces: Option<usize>,
}

fn identity() -> Identity {
    Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "aws-chunked-test").into()
}

fn params<'a>(identity: &'a Identity, now: SystemTime) -> v4::SigningParams<'a, SigningSettings> {
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    v4::SigningParams::builder()
        .identity(identity)
        .region(REGION)
        .name("s3")
        .time(now)
        .settings(settings)
        .build()
        .unwrap()
}

const CRC_TRAILER: &str = "x-amz-checksum-crc32";

/// Builds a signed `aws-chunked` PUT of `payload` to `key`, then spoils it as asked.
fn build(stub: &RunningStub, key: &str, payload: &[u8], mode: Mode, spoil: Spoil) -> Upload {
    let addr = stub.s3_addr.unwrap();
    let url = format!("http://{addr}/{BUCKET}/{}", encode_path(key));
    let decoded_len = if spoil == Spoil::LongerDecodedLength {
        payload.len() + 1
    } else {
        payload.len()
    };
    let mut headers: Vec<(String, String)> = vec![
        ("host".into(), addr.to_string()),
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
    let identity = identity();
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
    .unwrap();
    let (instructions, seed) = sign(request, &params(&identity, now).into())
        .unwrap()
        .into_parts();
    let (signed_headers, _) = instructions.into_parts();
    headers.extend(
        signed_headers
            .iter()
            .map(|h| (h.name().to_owned(), h.value().to_owned())),
    );
    headers.retain(|(k, _)| k != "host");

    let params = params(&identity, now);
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut previous = seed;
    for data in payload.chunks(CHUNK).chain(std::iter::once(&[][..])) {
        let mut framed = format!("{:x}", data.len()).into_bytes();
        if mode.signed() {
            let sig = sign_chunk(&Bytes::copy_from_slice(data), &previous, &params)
                .unwrap()
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
                .unwrap()
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
    Upload {
        url,
        headers,
        body,
        pieces: None,
    }
}

/// Printable test payloads (several chunks and a short tail), unique per tag.
fn payload(len: usize, tag: u8) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i * 7 + usize::from(tag) * 3 + i / 13) % 26) as u8)
        .collect()
}

fn md5_etag(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode(md5::Md5::digest(bytes)))
}

#[tokio::test]
async fn uploads_signed_by_aws_sigv4_store_exactly_the_payload() {
    let env = env().await;
    let cases = [
        (Mode::Signed, 3 * CHUNK + 100),
        (Mode::Signed, CHUNK),
        (Mode::Signed, 0),
        (Mode::SignedTrailer, 2 * CHUNK + 1),
        (Mode::SignedTrailer, 5),
        (Mode::UnsignedTrailer, 4 * CHUNK + 3),
        (Mode::UnsignedTrailer, 0),
    ];
    for (i, (mode, len)) in cases.into_iter().enumerate() {
        let key = format!("ok/{mode:?} {i}+ü.bin");
        let data = payload(len, i as u8);
        let up = build(&env.stub, &key, &data, mode, Spoil::None);
        assert!(up.body.len() > data.len(), "the body is framed");
        let answer = env.send(up).await;
        assert_eq!(answer.status, 200, "{mode:?} {len}: {}", answer.body);
        let etag = answer.headers.get("etag").unwrap().to_str().unwrap();
        assert_eq!(etag, md5_etag(&data), "the ETag is the MD5 of the payload");
        if mode.trailer() {
            assert_eq!(
                answer
                    .headers
                    .get(CRC_TRAILER)
                    .and_then(|v| v.to_str().ok()),
                Some(checksum(ChecksumAlgorithm::Crc32, &data).as_str()),
                "the verified trailer checksum is echoed"
            );
        }
        assert_eq!(env.stored(&key).await, data, "{mode:?} {len}");
        let info = env.origin.head(BUCKET, &key).await.unwrap();
        assert_eq!(info.size, len as u64);
        assert_eq!(
            info.content_type.as_deref(),
            Some("application/octet-stream")
        );
    }
    env.stub.shutdown().await;
}

#[tokio::test]
async fn framing_split_across_reads_decodes_the_same() {
    let env = env().await;
    for (i, mode) in [Mode::Signed, Mode::SignedTrailer, Mode::UnsignedTrailer]
        .into_iter()
        .enumerate()
    {
        let key = format!("pieces/{i}.bin");
        let data = payload(2 * CHUNK + 77, 40 + i as u8);
        let mut up = build(&env.stub, &key, &data, mode, Spoil::None);
        up.pieces = Some(7);
        let answer = env.send(up).await;
        assert_eq!(answer.status, 200, "{mode:?}: {}", answer.body);
        assert_eq!(env.stored(&key).await, data, "{mode:?}");
    }
    env.stub.shutdown().await;
}

/// Every refused upload leaves the object stored before it untouched.
#[tokio::test]
async fn bad_uploads_are_refused_and_change_nothing() {
    let env = env().await;
    let key = "victim/object one.bin";
    let old = payload(5000, 99);
    let old_etag = env
        .origin
        .put(BUCKET, key, Bytes::from(old.clone()), None)
        .await
        .unwrap();
    let fresh = "victim/never-written.bin";
    let new = payload(3 * CHUNK + 10, 1);

    let cases: &[(Mode, Spoil, u16, &str)] = &[
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
        // Cut inside the last data chunk, before the final chunk, and the closing CRLF.
        (Mode::Signed, Spoil::Cut(150), 400, "IncompleteBody"),
        (Mode::SignedTrailer, Spoil::Cut(2), 400, "IncompleteBody"),
        (Mode::UnsignedTrailer, Spoil::Cut(2), 400, "IncompleteBody"),
        (Mode::UnsignedTrailer, Spoil::Cut(40), 400, "IncompleteBody"),
        (Mode::Signed, Spoil::Garbage, 400, "IncompleteBody"),
    ];
    for &(mode, spoil, status, code) in cases {
        for target in [key, fresh] {
            let up = build(&env.stub, target, &new, mode, spoil);
            let answer = env.send(up).await;
            assert_eq!(
                (answer.status, answer.code()),
                (status, Some(code)),
                "{mode:?} {spoil:?} on {target}: {}",
                answer.body
            );
            answer.assert_error(status, code);
        }
        assert_eq!(
            env.stored(key).await,
            old,
            "{mode:?} {spoil:?} changed the stored object"
        );
        assert_eq!(env.origin.head(BUCKET, key).await.unwrap().etag, old_etag);
        let gone = env.origin.head(BUCKET, fresh).await.unwrap_err();
        assert_eq!(
            gone.kind(),
            talon_protocols::ErrorKind::NoSuchKey,
            "{mode:?} {spoil:?} created an object"
        );
    }
    // The same upload, unspoiled, goes through: the refusals were about the spoiling.
    let answer = env
        .send(build(
            &env.stub,
            key,
            &new,
            Mode::SignedTrailer,
            Spoil::None,
        ))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(env.stored(key).await, new);
    env.stub.shutdown().await;
}
