//! Moving bytes out: response bodies streamed from a file or from generated content
//! (with pacing for the bandwidth fault and a cut for the truncation fault), and
//! server-side copies into a staging file. Uploads arrive through `talon-protocols`'
//! verifying stream ([`crate::backend`]).

use std::io::{self, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Incoming;
use md5::{Digest as _, Md5};
use talon_protocols::checksum::ChecksumAlgorithm;
use talon_protocols::{Error, ErrorKind, Result};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::metrics::Metrics;
use crate::store::{ObjectBody, StagedFile};
use talon_core::Backend;

/// The body type of every response.
pub type ResponseBody = UnsyncBoxBody<Bytes, io::Error>;

/// Bytes read from a file or generated per response chunk.
const CHUNK: usize = 256 * 1024;

/// An empty body.
pub fn empty() -> ResponseBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A body held in memory.
pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// How a GET body is delivered.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    /// Cap on bytes per second, if any.
    pub bandwidth: Option<u64>,
    /// Stop (and fail the connection) after this many bytes.
    pub truncate_after: Option<u64>,
    /// Which counter the bytes go to.
    pub protocol: Backend,
}

enum Source {
    File(tokio::fs::File),
    Generated(crate::generated::GeneratedObject),
}

struct StreamState {
    source: Source,
    pos: u64,
    end: u64,
    sent: u64,
    started: Instant,
    delivery: Delivery,
    metrics: Arc<Metrics>,
    failed: bool,
}

/// Streams `start..end` of an object.
pub fn object_stream(
    body: ObjectBody,
    start: u64,
    end: u64,
    delivery: Delivery,
    metrics: Arc<Metrics>,
) -> ResponseBody {
    let source = match body {
        ObjectBody::File(f) => Source::File(tokio::fs::File::from_std(f)),
        ObjectBody::Generated(g) => Source::Generated(g),
    };
    let state = StreamState {
        source,
        pos: start,
        end,
        sent: 0,
        started: Instant::now(),
        delivery,
        metrics,
        failed: false,
    };
    let first_seek = start;
    let stream =
        futures_util::stream::unfold((state, Some(first_seek)), |(mut st, seek)| async move {
            if st.failed || st.pos >= st.end {
                return None;
            }
            if let Some(cut) = st.delivery.truncate_after
                && st.sent >= cut
            {
                // Return Pending once so hyper flushes the headers and the bytes it
                // holds: the client must see an answer that starts and then breaks
                // off, not a connection closed before any answer.
                tokio::task::yield_now().await;
                st.failed = true;
                return Some((
                    Err(io::Error::other("body truncated by fault injection")),
                    (st, None),
                ));
            }
            let mut want = (st.end - st.pos).min(CHUNK as u64) as usize;
            if let Some(cut) = st.delivery.truncate_after {
                want = want.min((cut - st.sent).max(1) as usize);
            }
            let mut buf = vec![0u8; want];
            let got = match &mut st.source {
                Source::File(f) => {
                    if let Some(offset) = seek
                        && let Err(e) = f.seek(SeekFrom::Start(offset)).await
                    {
                        st.failed = true;
                        return Some((Err(e), (st, None)));
                    }
                    match f.read(&mut buf).await {
                        Ok(0) => {
                            st.failed = true;
                            return Some((
                                Err(io::Error::other("object file shrank while it was read")),
                                (st, None),
                            ));
                        }
                        Ok(n) => n,
                        Err(e) => {
                            st.failed = true;
                            return Some((Err(e), (st, None)));
                        }
                    }
                }
                Source::Generated(g) => {
                    g.fill(st.pos, &mut buf);
                    want
                }
            };
            buf.truncate(got);
            st.pos += got as u64;
            st.sent += got as u64;
            st.metrics.get_bytes(st.delivery.protocol, got as u64);
            if let Some(bw) = st.delivery.bandwidth {
                let due = st.started + Duration::from_secs_f64(st.sent as f64 / bw as f64);
                tokio::time::sleep_until(due.into()).await;
            }
            Some((Ok(Bytes::from(buf)), (st, None)))
        });
    StreamBody::new(stream.map_ok(Frame::data)).boxed_unsync()
}

/// What a received body turned out to be.
#[derive(Debug, Clone)]
pub struct Received {
    /// Decoded bytes stored.
    pub len: u64,
    /// MD5, hex.
    pub md5_hex: String,
    /// MD5, base64.
    pub md5_base64: String,
    /// The verified full-object checksum, from a header or a trailer.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
}

/// Reads a small request body (XML documents) into memory, up to `limit` bytes.
///
/// # Errors
/// [`ErrorKind::EntityTooLarge`] past the limit, [`ErrorKind::IncompleteBody`] when it
/// breaks off.
pub async fn read_small(body: Incoming, limit: usize) -> Result<Bytes> {
    let limited = http_body_util::Limited::new(body, limit);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Error::new(
            ErrorKind::EntityTooLarge,
            format!("the request body exceeds {limit} bytes"),
        )),
        Err(e) => Err(Error::new(
            ErrorKind::IncompleteBody,
            format!("the request body broke off: {e}"),
        )),
    }
}

/// Copies an object's bytes into a staging file (server-side copies), returning the MD5.
///
/// # Errors
/// I/O errors as [`ErrorKind::InternalError`].
pub fn copy_object(body: ObjectBody, size: u64, staged: &mut StagedFile) -> Result<Received> {
    copy_range(body, 0, size, staged)
}

/// Copies `len` bytes of an object from offset `start` into a staging file (a copied
/// part), returning the MD5. The caller keeps `start + len` within the object.
///
/// # Errors
/// I/O errors as [`ErrorKind::InternalError`], and a file shorter than asked.
pub fn copy_range(
    body: ObjectBody,
    start: u64,
    len: u64,
    staged: &mut StagedFile,
) -> Result<Received> {
    use std::io::{Read, Seek, Write};
    let size = len;
    let io_err = |e: io::Error| {
        Error::new(ErrorKind::InternalError, format!("copying the object: {e}")).with_source(e)
    };
    let out = staged.file().map_err(io_err)?;
    let mut md5 = Md5::new();
    let mut buf = vec![0u8; CHUNK];
    let mut done = 0u64;
    match body {
        ObjectBody::File(mut f) => {
            f.seek(io::SeekFrom::Start(start)).map_err(io_err)?;
            while done < size {
                let want = (size - done).min(CHUNK as u64) as usize;
                let n = f.read(&mut buf[..want]).map_err(io_err)?;
                if n == 0 {
                    return Err(Error::new(
                        ErrorKind::InternalError,
                        "the object ended before the range copied",
                    ));
                }
                md5.update(&buf[..n]);
                out.write_all(&buf[..n]).map_err(io_err)?;
                done += n as u64;
            }
        }
        ObjectBody::Generated(g) => {
            while done < size {
                let n = (size - done).min(CHUNK as u64) as usize;
                g.fill(start + done, &mut buf[..n]);
                md5.update(&buf[..n]);
                out.write_all(&buf[..n]).map_err(io_err)?;
                done += n as u64;
            }
        }
    }
    let md5 = md5.finalize();
    Ok(Received {
        len: done,
        md5_hex: hex::encode(md5),
        md5_base64: base64_encode(&md5),
        checksum: None,
    })
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Drains a stream, for tests.
#[cfg(test)]
pub async fn collect(body: ResponseBody) -> io::Result<Vec<u8>> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let mut s = body.into_data_stream();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::generated::GeneratedObject;

    fn delivery() -> Delivery {
        Delivery {
            bandwidth: None,
            truncate_after: None,
            protocol: Backend::S3,
        }
    }

    #[tokio::test]
    async fn generated_ranges_stream_exactly() {
        let g = GeneratedObject::new("b", "k", 1_000_000, 3);
        let mut expected = vec![0u8; 700_000];
        g.fill(123, &mut expected);
        let metrics = Arc::new(Metrics::default());
        let body = object_stream(
            ObjectBody::Generated(g),
            123,
            700_123,
            delivery(),
            metrics.clone(),
        );
        assert_eq!(collect(body).await.unwrap(), expected);
        assert!(
            metrics
                .render()
                .contains("talon_origin_get_bytes_total{protocol=\"s3\"} 700000")
        );
    }

    #[tokio::test]
    async fn file_ranges_stream_exactly_and_truncation_fails_the_body() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let metrics = Arc::new(Metrics::default());
        let f = std::fs::File::open(&path).unwrap();
        let body = object_stream(
            ObjectBody::File(f),
            10,
            500_010,
            delivery(),
            metrics.clone(),
        );
        assert_eq!(collect(body).await.unwrap(), &data[10..500_010]);
        let f = std::fs::File::open(&path).unwrap();
        let cut = Delivery {
            truncate_after: Some(1000),
            ..delivery()
        };
        assert!(
            collect(object_stream(ObjectBody::File(f), 0, 600_000, cut, metrics))
                .await
                .is_err()
        );
    }
}
